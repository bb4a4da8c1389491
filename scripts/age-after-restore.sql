-- After a pg_restore: point Apache AGE's catalog at the restored graph schemas again.
--
-- AGE keeps one row per graph in ag_catalog.ag_graph and one per label in ag_label (pg_dump
-- includes both: they are extension configuration tables). A graph's id (ag_graph.graphid, and
-- ag_label.graph, which references it) is the oid of the graph's schema, stored as a bare oid:
-- the dump keeps the source cluster's number, while the restored schema has a new oid (the
-- regnamespace and regclass columns are dumped as names and do follow). AGE 1.5 reads labels
-- through the stale id, but creating another graph fails if its schema's new oid equals a stale
-- id (the unique index on graphid), and later AGE versions refuse a graph whose id is no schema
-- ("graph with oid N does not exist"). So every stale row is rewritten with its schema's oid.
--
-- Run as a superuser (AGE's catalog belongs to the superuser that created the extension), in
-- one transaction, in the restored database: `psql -1 -v ON_ERROR_STOP=1 -f …`.
-- scripts/restore.sh runs it; running it again changes nothing.

CREATE TEMPORARY TABLE engram_stale_graph ON COMMIT DROP AS
SELECT graphid AS old_id, namespace::oid AS new_id, name, namespace
FROM ag_catalog.ag_graph
WHERE graphid <> namespace::oid;

CREATE TEMPORARY TABLE engram_stale_label ON COMMIT DROP AS
SELECT l.name, g.new_id AS graph, l.id, l.kind, l.relation, l.seq_name
FROM ag_catalog.ag_label l
JOIN engram_stale_graph g ON g.old_id = l.graph;

-- Deleted and inserted again rather than updated in place: ag_label's foreign key to ag_graph
-- is checked row by row, and a new id may equal another graph's stale one (both clusters count
-- oids from the same start), which the unique indexes on the ids would refuse mid-update.
DELETE FROM ag_catalog.ag_label l USING engram_stale_graph g WHERE l.graph = g.old_id;
DELETE FROM ag_catalog.ag_graph a USING engram_stale_graph g WHERE a.graphid = g.old_id;
INSERT INTO ag_catalog.ag_graph (graphid, name, namespace)
SELECT new_id, name, namespace FROM engram_stale_graph;
INSERT INTO ag_catalog.ag_label (name, graph, id, kind, relation, seq_name)
SELECT name, graph, id, kind, relation, seq_name FROM engram_stale_label;

-- What must hold now, or the transaction is rolled back: each graph's id is its schema's oid,
-- each label table lives in its graph's schema, and every engram graph schema (g_ + a
-- project's hex id) is a graph AGE knows.
DO $check$
DECLARE
    bad text;
BEGIN
    SELECT string_agg(name::text, ', ') INTO bad
    FROM ag_catalog.ag_graph WHERE graphid <> namespace::oid;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'age-after-restore: graphs whose id is not their schema''s oid: %', bad;
    END IF;
    SELECT string_agg(l.relation::text, ', ') INTO bad
    FROM ag_catalog.ag_label l
    LEFT JOIN ag_catalog.ag_graph g ON g.graphid = l.graph
    LEFT JOIN pg_catalog.pg_class c ON c.oid = l.relation
    WHERE g.graphid IS NULL OR c.relnamespace IS DISTINCT FROM g.namespace::oid;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'age-after-restore: labels outside their graph''s schema: %', bad;
    END IF;
    SELECT string_agg(n.nspname::text, ', ') INTO bad
    FROM pg_catalog.pg_namespace n
    WHERE n.nspname ~ '^g_[0-9a-f]{32}$'
      AND NOT EXISTS (SELECT 1 FROM ag_catalog.ag_graph g WHERE g.namespace::oid = n.oid);
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'age-after-restore: graph schemas AGE does not know: %', bad;
    END IF;
END
$check$;

SELECT (SELECT count(*) FROM ag_catalog.ag_graph) AS graphs,
       (SELECT count(*) FROM engram_stale_graph) AS repointed;
