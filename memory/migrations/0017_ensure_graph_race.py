"""engram_ensure_graph: two first uses of a project's graph at once no longer fail.

The second caller waited on the advisory lock, then checked again with to_regnamespace(),
which reads the backend's catalog cache: it could still miss the schema the first caller had
just committed, and create_graph() then failed with "graph … already exists". The check after
the lock now reads pg_namespace with the statement's own snapshot, which sees that commit.

The function's whole text is here (the latest definition); the reverse restores 0012's.
"""

from importlib import import_module

from django.db import migrations

_BEFORE = import_module("memory.migrations.0012_memoryentity").ENSURE_GRAPH
ENSURE_GRAPH = r"""
CREATE OR REPLACE FUNCTION engram_ensure_graph(p_project uuid) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    g text := 'g_' || replace(p_project::text, '-', '');
    t text;
BEGIN
    IF p_project IS NULL OR p_project IS DISTINCT FROM public.engram_current_project() THEN
        RAISE EXCEPTION 'engram_ensure_graph: not the current tenant''s project'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF to_regnamespace(g) IS NULL THEN  -- AGE keeps each graph in a schema of its name
        -- Two first uses at once: the second waits here, then finds the graph.
        PERFORM pg_advisory_xact_lock(hashtextextended('engram_ensure_graph:' || g, 0));
    END IF;
    -- After the lock, a fresh read: to_regnamespace() may answer from a stale catalog cache.
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = g) THEN
        PERFORM ag_catalog.create_graph(g::name);
        PERFORM ag_catalog.create_vlabel(g::name, 'Entity'::name);
        PERFORM ag_catalog.create_elabel(g::name, 'RELATES'::name);
        -- AGE 1.5 indexes nothing: the ids the joins follow; an entity's name, as AGE
        -- compiles `n.name = $name` (the anchor of every lookup); and the property maps,
        -- for MATCH {…} patterns that test containment (@>).
        EXECUTE format('CREATE UNIQUE INDEX entity_id ON %I."Entity" (id)', g);
        EXECUTE format('CREATE INDEX entity_name ON %I."Entity" (ag_catalog.agtype_access_operator('
                       'VARIADIC ARRAY[properties, ''"name"''::ag_catalog.agtype]))', g);
        EXECUTE format('CREATE INDEX entity_props ON %I."Entity" '
                       'USING gin (properties)', g);
        EXECUTE format('CREATE UNIQUE INDEX relates_id ON %I."RELATES" (id)', g);
        EXECUTE format('CREATE INDEX relates_start ON %I."RELATES" (start_id)', g);
        EXECUTE format('CREATE INDEX relates_end ON %I."RELATES" (end_id)', g);
        EXECUTE format('CREATE INDEX relates_props ON %I."RELATES" '
                       'USING gin (properties)', g);
        -- Second wall for reads: every table of this graph shows rows only to a transaction
        -- whose tenant is this project (cypher() MATCH compiles to ordinary scans, so the
        -- policy applies; AGE 1.5's CREATE/MERGE/SET write around it, see memory.graph).
        FOR t IN SELECT c.relname FROM pg_class c
                 WHERE c.relnamespace = g::regnamespace AND c.relkind = 'r' LOOP
            EXECUTE format('ALTER TABLE %I.%I ENABLE ROW LEVEL SECURITY', g, t);
            EXECUTE format('ALTER TABLE %I.%I FORCE ROW LEVEL SECURITY', g, t);
            EXECUTE format('CREATE POLICY project_isolation ON %I.%I '
                           'USING (public.engram_current_project() = %L::uuid) '
                           'WITH CHECK (public.engram_current_project() = %L::uuid)',
                           g, t, p_project, p_project);
        END LOOP;
    END IF;
    -- The calling (application) role: read and write through cypher(), no DELETE, no DDL.
    IF session_user <> current_user AND NOT has_schema_privilege(session_user, g, 'USAGE') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', g, session_user);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA %I TO %I',
                       g, session_user);
        EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO %I', g, session_user);
    END IF;
    RETURN g;
END
$fn$;
REVOKE ALL ON FUNCTION engram_ensure_graph(uuid) FROM PUBLIC;
"""


class Migration(migrations.Migration):
    dependencies = [("memory", "0016_redacted")]

    operations = [migrations.RunSQL(ENSURE_GRAPH, reverse_sql=_BEFORE)]
