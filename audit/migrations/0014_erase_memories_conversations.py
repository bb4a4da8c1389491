"""Redaction and retention purges clear the erased texts from the keyword context of their whole
stored conversation (issue #14).

Since memory 0018 a raw message's neighbours may have come in other add requests of the same
conversation (turn-by-turn adds), and quote it in their context_before/context_after. The
neighbours engram_erase_memories cleans were those of the same add request; they are now those
of the same request or conversation (memory.conversation_id, or the request id a conversation
started with). Same signature and contract as audit 0012.

The function's whole text is here (the latest definition); the reverse restores 0012's.
"""

from importlib import import_module

from django.db import migrations

_0012 = import_module("audit.migrations.0012_erase_memories")
SIGNATURE = _0012.ERASE_MEMORIES_SIGNATURE
ERASE_MEMORIES = r"""
CREATE OR REPLACE FUNCTION engram_erase_memories(
    p_project uuid, p_memories uuid[], p_redact boolean, p_subject_kind text,
    p_subject_hash text, p_actor text, p_reason text, p_dry_run boolean
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_marker constant text := '[redacted]';
    v_marker_hash constant text := encode(sha256(convert_to('[redacted]', 'UTF8')), 'hex');
    v_memories uuid[];
    v_ids text[];
    v_texts text[];
    v_sources uuid[];       -- the add requests (and infer=false batches) they came from
    v_groups uuid[];        -- those requests and the stored conversations they are in
    v_users text[];
    v_null_user boolean;
    v_lineage uuid[];       -- the memories they superseded (whose UPDATE rows quote them)
    v_events uuid[];
    v_graph text := 'g_' || replace(p_project::text, '-', '');
    v_probes ag_catalog.agtype[];
    v_orphans ag_catalog.agtype[];
    v_edges_gone ag_catalog.graphid[] := '{}';
    v_edges_kept ag_catalog.graphid[] := '{}';
    v_vertices ag_catalog.graphid[] := '{}';
    v_counts jsonb;
    v_total bigint;
    n_feedback bigint;
    n_entity_links bigint;
    n_history bigint;
    n_contexts bigint;
    n_summaries bigint;
    n_events bigint;
    n_exports bigint;
    n_idempotency bigint;
BEGIN
    IF p_project IS NULL OR p_memories IS NULL OR p_redact IS NULL THEN
        RAISE EXCEPTION 'engram_erase_memories: a project, memory ids and a mode are required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_subject_kind IS NULL OR p_subject_kind NOT IN ('memory', 'retention') THEN
        RAISE EXCEPTION 'engram_erase_memories: the subject kind is memory or retention'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(p_subject_hash, '') !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'engram_erase_memories: the subject hash must be 64 hexadecimal digits'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(p_actor, '') = '' OR length(p_actor) > 200 THEN
        RAISE EXCEPTION 'engram_erase_memories: an actor of 1 to 200 characters is required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF public.engram_current_project() IS DISTINCT FROM p_project THEN
        RAISE EXCEPTION 'engram_erase_memories: run it in the tenant context of project %',
            p_project USING ERRCODE = 'insufficient_privilege';
    END IF;

    -- A redacted memory has nothing left to remove: a second redaction counts nothing.
    IF p_dry_run IS FALSE THEN
        PERFORM 1 FROM public.memory_memory m
        WHERE m.project_id = p_project AND m.id = ANY(p_memories) ORDER BY m.id FOR UPDATE;
    END IF;
    SELECT coalesce(array_agg(m.id ORDER BY m.id), '{}'),
           coalesce(array_agg(DISTINCT m.text) FILTER (WHERE m.text <> ''), '{}'),
           coalesce(array_agg(DISTINCT m.source_event_id)
                    FILTER (WHERE m.source_event_id IS NOT NULL), '{}'),
           coalesce(array_agg(DISTINCT m.user_id) FILTER (WHERE m.user_id IS NOT NULL), '{}'),
           coalesce(bool_or(m.user_id IS NULL), false)
      INTO v_memories, v_texts, v_sources, v_users, v_null_user
    FROM public.memory_memory m
    WHERE m.project_id = p_project AND m.id = ANY(p_memories) AND m.state <> 'redacted'
      -- A purge erases only memories still deleted (one restored meanwhile is left alone).
      AND (p_redact OR m.state = 'deleted');
    v_ids := v_memories::text[];
    SELECT coalesce(array_agg(DISTINCT x.g) FILTER (WHERE x.g IS NOT NULL), '{}')
      INTO v_groups
    FROM (SELECT unnest(v_sources) AS g
          UNION ALL SELECT m.conversation_id FROM public.memory_memory m
          WHERE m.project_id = p_project AND m.id = ANY(v_memories)) AS x;
    -- Every version of their texts: an earlier wording is quoted where it was copied then.
    SELECT coalesce(array_agg(DISTINCT x.t) FILTER (WHERE x.t <> '' AND x.t <> v_marker), '{}')
      INTO v_texts
    FROM (SELECT unnest(v_texts) AS t
          UNION ALL SELECT h.old_memory FROM public.memory_memoryhistory h
                    WHERE h.project_id = p_project AND h.memory_id = ANY(v_memories)
          UNION ALL SELECT h.new_memory FROM public.memory_memoryhistory h
                    WHERE h.project_id = p_project AND h.memory_id = ANY(v_memories)) x;

    SELECT coalesce(array_agg(m.id), '{}') INTO v_lineage FROM public.memory_memory m
    WHERE m.project_id = p_project AND m.replaced_by_id = ANY(v_memories)
      AND NOT (m.id = ANY(v_memories));

    -- The add requests that carried them: those they came from, those that changed them
    -- (their history rows), and those whose results name them (of the same users: events
    -- carry their scope, and extraction compares facts within a scope).
    SELECT coalesce(array_agg(e.id), '{}') INTO v_events FROM public.memory_memoryevent e
    WHERE e.project_id = p_project AND cardinality(v_memories) > 0 AND (
        e.id = ANY(v_sources)
        OR e.id IN (SELECT h.event_id FROM public.memory_memoryhistory h
                    WHERE h.project_id = p_project AND h.memory_id = ANY(v_memories)
                      AND h.event_id IS NOT NULL)
        OR ((e.user_id = ANY(v_users) OR (v_null_user AND e.user_id IS NULL))
            AND EXISTS (SELECT 1 FROM jsonb_array_elements(CASE jsonb_typeof(e.results)
                                      WHEN 'array' THEN e.results ELSE '[]' END) r
                        WHERE r->>'id' = ANY(v_ids) OR r->>'replaces' = ANY(v_ids))));
    n_events := cardinality(v_events);

    SELECT count(*) INTO n_feedback FROM public.memory_feedback f
    WHERE f.project_id = p_project AND f.memory_id = ANY(v_memories)
      AND (NOT p_redact OR f.feedback_reason <> '');

    SELECT count(*) INTO n_entity_links FROM public.memory_memoryentity l
    WHERE l.project_id = p_project AND l.memory_id = ANY(v_memories);

    SELECT count(*) INTO n_history FROM public.memory_memoryhistory h
    WHERE h.project_id = p_project AND (h.memory_id = ANY(v_memories)
        OR (h.memory_id = ANY(v_lineage)
            AND (h.old_memory = ANY(v_texts) OR h.new_memory = ANY(v_texts))));

    SELECT count(*) INTO n_contexts FROM public.memory_memory m
    WHERE m.project_id = p_project
      AND (m.source_event_id = ANY(v_groups) OR m.conversation_id = ANY(v_groups))
      AND NOT (m.id = ANY(v_memories))
      AND (m.context_before = ANY(v_texts) OR m.context_after = ANY(v_texts));

    SELECT count(*) INTO n_summaries FROM public.memory_scopesummary s
    WHERE s.project_id = p_project AND EXISTS (
        SELECT 1 FROM public.memory_memory m
        WHERE m.project_id = p_project AND m.id = ANY(v_memories)
          AND s.user_id IS NOT DISTINCT FROM m.user_id
          AND s.agent_id IS NOT DISTINCT FROM m.agent_id
          AND s.app_id IS NOT DISTINCT FROM m.app_id
          AND s.run_id IS NOT DISTINCT FROM m.run_id);

    SELECT count(*) INTO n_exports FROM public.memory_memoryexport x
    WHERE x.project_id = p_project AND cardinality(v_memories) > 0
      AND EXISTS (SELECT 1 FROM jsonb_array_elements(CASE jsonb_typeof(x.result)
                                WHEN 'array' THEN x.result ELSE '[]' END) r
                  WHERE r->>'id' = ANY(v_ids));

    SELECT count(*) INTO n_idempotency FROM public.memory_idempotentrequest i
    WHERE i.project_id = p_project AND cardinality(v_memories) > 0 AND i.response IS NOT NULL
      AND EXISTS (SELECT 1 FROM jsonb_path_query(i.response, 'lax $.**.id') AS x(v)
                  WHERE x.v #>> '{}' = ANY(v_ids));

    -- The graph: edges citing them (memory_ids), those only they back (to delete), the
    -- others (to stop citing them); entities they link, or at the ends of deleted edges,
    -- that are left with no edge and no other memory's link (to delete).
    IF cardinality(v_memories) > 0 AND to_regnamespace(v_graph) IS NOT NULL THEN
        IF p_dry_run IS FALSE THEN
            EXECUTE format('LOCK TABLE %I._ag_label_vertex, %I._ag_label_edge '
                           'IN SHARE ROW EXCLUSIVE MODE', v_graph, v_graph);
        END IF;
        SELECT array_agg(jsonb_build_object('memory_ids', jsonb_build_array(i))::text
                         ::ag_catalog.agtype)
          INTO v_probes FROM unnest(v_ids) AS i;
        -- Also gone: the invalid edges of their add requests that no memory backs any more
        -- (a reworded memory stops citing its old relations: they are left with none).
        SELECT coalesce(array_agg(jsonb_build_object('event_id', e::text, 'valid', false)::text
                                  ::ag_catalog.agtype), '{}')
          INTO v_orphans FROM unnest(v_events) AS e;
        EXECUTE format(
            'SELECT coalesce(array_agg(c.id) FILTER (WHERE c.gone), ''{}''), '
            '       coalesce(array_agg(c.id) FILTER (WHERE NOT c.gone), ''{}'') '
            'FROM (SELECT r.id, NOT EXISTS ('
            '          SELECT 1 FROM jsonb_array_elements_text(ag_catalog.agtype_out('
            '              r.properties)::text::jsonb -> ''memory_ids'') AS x(id) '
            '          WHERE NOT x.id = ANY($2)) AS gone '
            '      FROM %I._ag_label_edge r '
            '      WHERE r.properties OPERATOR(ag_catalog.@>) ANY($1) '
            '         OR (r.properties OPERATOR(ag_catalog.@>) ANY($3) '
            '             AND coalesce(ag_catalog.agtype_out(r.properties)::text::jsonb '
            '                          -> ''memory_ids'', ''[]'') = ''[]'')) c', v_graph)
            INTO v_edges_gone, v_edges_kept USING v_probes, v_ids, v_orphans;
        EXECUTE format(
            'SELECT coalesce(array_agg(v.id), ''{}'') FROM %1$I._ag_label_vertex v '
            'WHERE (v.id::text IN (SELECT l.vertex_id::text FROM public.memory_memoryentity l '
            '                      WHERE l.project_id = $3 AND l.memory_id = ANY($2)) '
            '       OR EXISTS (SELECT 1 FROM %1$I._ag_label_edge r '
            '                  WHERE r.id OPERATOR(ag_catalog.=) ANY($1) '
            '                    AND v.id OPERATOR(ag_catalog.=) '
            '                        ANY(ARRAY[r.start_id, r.end_id]))) '
            '  AND NOT EXISTS (SELECT 1 FROM %1$I._ag_label_edge r '
            '                  WHERE (r.start_id OPERATOR(ag_catalog.=) v.id '
            '                         OR r.end_id OPERATOR(ag_catalog.=) v.id) '
            '                    AND NOT r.id OPERATOR(ag_catalog.=) ANY($1)) '
            '  AND NOT EXISTS (SELECT 1 FROM public.memory_memoryentity l '
            '                  WHERE l.project_id = $3 AND l.vertex_id::text = v.id::text '
            '                    AND NOT l.memory_id = ANY($2))', v_graph)
            INTO v_vertices USING v_edges_gone, v_memories, p_project;
    END IF;

    v_counts := jsonb_build_object(
        'memories', cardinality(v_memories), 'feedback', n_feedback,
        'entity_links', n_entity_links, 'graph_entities', cardinality(v_vertices),
        'graph_relations', cardinality(v_edges_gone) + cardinality(v_edges_kept),
        'history', n_history, 'contexts', n_contexts, 'summaries', n_summaries,
        'events', n_events, 'exports', n_exports, 'idempotency', n_idempotency);
    IF p_dry_run IS NOT FALSE THEN
        RETURN v_counts;
    END IF;

    PERFORM set_config('engram.erasing', 'on', true);

    UPDATE public.memory_memoryevent e SET
        payload = CASE WHEN jsonb_typeof(e.payload) = 'object' AND e.payload ? 'messages'
            THEN jsonb_set(e.payload, '{messages}',
                           public.engram_redacted_messages(e.payload->'messages'))
            ELSE e.payload END,
        results = public.engram_redacted_results(e.results, v_ids),
        graph = CASE WHEN jsonb_typeof(e.graph) = 'object' AND e.graph <> '{}'
            THEN e.graph || '{"entities": [], "added": [], "invalidated": []}'::jsonb
            ELSE e.graph END
    WHERE e.project_id = p_project AND e.id = ANY(v_events);

    IF cardinality(v_edges_kept) > 0 THEN
        EXECUTE format(
            'UPDATE %I._ag_label_edge r SET properties = r.properties OPERATOR(ag_catalog.||) '
            '    jsonb_build_object(''memory_ids'', (SELECT coalesce(jsonb_agg(x.id ORDER BY x.o), '
            '        ''[]'') FROM jsonb_array_elements(ag_catalog.agtype_out(r.properties)::text'
            '        ::jsonb -> ''memory_ids'') WITH ORDINALITY AS x(id, o) '
            '        WHERE NOT (x.id #>> ''{}'') = ANY($2)))::text::ag_catalog.agtype '
            'WHERE r.id OPERATOR(ag_catalog.=) ANY($1)', v_graph)
            USING v_edges_kept, v_ids;
    END IF;
    IF cardinality(v_edges_gone) > 0 THEN
        EXECUTE format('DELETE FROM %I._ag_label_edge r WHERE r.id OPERATOR(ag_catalog.=) ANY($1)',
                       v_graph) USING v_edges_gone;
    END IF;
    DELETE FROM public.memory_memoryentity l
    WHERE l.project_id = p_project AND l.memory_id = ANY(v_memories);
    IF cardinality(v_vertices) > 0 THEN
        EXECUTE format('DELETE FROM %I._ag_label_vertex v '
                       'WHERE v.id OPERATOR(ag_catalog.=) ANY($1)', v_graph) USING v_vertices;
    END IF;

    DELETE FROM public.memory_scopesummary s
    WHERE s.project_id = p_project AND EXISTS (
        SELECT 1 FROM public.memory_memory m
        WHERE m.project_id = p_project AND m.id = ANY(v_memories)
          AND s.user_id IS NOT DISTINCT FROM m.user_id
          AND s.agent_id IS NOT DISTINCT FROM m.agent_id
          AND s.app_id IS NOT DISTINCT FROM m.app_id
          AND s.run_id IS NOT DISTINCT FROM m.run_id);

    UPDATE public.memory_memoryexport x SET result = (
        SELECT jsonb_agg(CASE WHEN r->>'id' = ANY(v_ids)
                         THEN r || jsonb_build_object('memory', v_marker, 'metadata', '{}'::jsonb)
                         ELSE r END ORDER BY i)
        FROM jsonb_array_elements(x.result) WITH ORDINALITY AS t(r, i))
    WHERE x.project_id = p_project AND cardinality(v_memories) > 0
      AND jsonb_typeof(x.result) = 'array'
      AND EXISTS (SELECT 1 FROM jsonb_array_elements(x.result) r WHERE r->>'id' = ANY(v_ids));

    DELETE FROM public.memory_idempotentrequest i
    WHERE i.project_id = p_project AND cardinality(v_memories) > 0 AND i.response IS NOT NULL
      AND EXISTS (SELECT 1 FROM jsonb_path_query(i.response, 'lax $.**.id') AS x(v)
                  WHERE x.v #>> '{}' = ANY(v_ids));

    UPDATE public.memory_memory m SET
        context_before = CASE WHEN m.context_before = ANY(v_texts) THEN ''
                         ELSE m.context_before END,
        context_after = CASE WHEN m.context_after = ANY(v_texts) THEN '' ELSE m.context_after END
    WHERE m.project_id = p_project
      AND (m.source_event_id = ANY(v_groups) OR m.conversation_id = ANY(v_groups))
      AND NOT (m.id = ANY(v_memories))
      AND (m.context_before = ANY(v_texts) OR m.context_after = ANY(v_texts));

    -- The versions they superseded keep their rows; where those quote them, the text goes.
    UPDATE public.memory_memoryhistory h SET
        old_memory = CASE WHEN h.old_memory = ANY(v_texts) THEN v_marker ELSE h.old_memory END,
        new_memory = CASE WHEN h.new_memory = ANY(v_texts) THEN v_marker ELSE h.new_memory END
    WHERE h.project_id = p_project AND h.memory_id = ANY(v_lineage)
      AND (h.old_memory = ANY(v_texts) OR h.new_memory = ANY(v_texts));

    IF p_redact THEN
        UPDATE public.memory_feedback f SET feedback_reason = ''
        WHERE f.project_id = p_project AND f.memory_id = ANY(v_memories)
          AND f.feedback_reason <> '';
        UPDATE public.memory_memoryhistory h SET
            old_memory = CASE WHEN h.old_memory IS NULL THEN NULL ELSE v_marker END,
            new_memory = CASE WHEN h.new_memory IS NULL THEN NULL ELSE v_marker END,
            input = public.engram_redacted_messages(h.input),
            metadata = '{}'::jsonb
        WHERE h.project_id = p_project AND h.memory_id = ANY(v_memories);
        UPDATE public.memory_memory m SET
            text = v_marker, hash = v_marker_hash,
            embedding = array_fill(0::real, ARRAY[public.vector_dims(m.embedding)])::public.vector,
            context_before = '', context_after = '', metadata = '{}'::jsonb,
            state = 'redacted', updated_at = clock_timestamp()
        WHERE m.project_id = p_project AND m.id = ANY(v_memories);
        INSERT INTO public.memory_memoryhistory
            (id, project_id, memory_id, event, old_memory, new_memory, actor, event_id, input,
             metadata, categories, user_id, agent_id, app_id, run_id, created_at)
        SELECT gen_random_uuid(), p_project, m.id, 'REDACT', NULL, NULL, p_actor, NULL,
               '[]'::jsonb,
               CASE WHEN coalesce(p_reason, '') = '' THEN '{}'::jsonb
                    ELSE jsonb_build_object('reason', p_reason) END,
               to_jsonb(m.categories), m.user_id, m.agent_id, m.app_id, m.run_id, clock_timestamp()
        FROM public.memory_memory m
        WHERE m.project_id = p_project AND m.id = ANY(v_memories);
    ELSE
        DELETE FROM public.memory_feedback f
        WHERE f.project_id = p_project AND f.memory_id = ANY(v_memories);
        DELETE FROM public.memory_memoryhistory h
        WHERE h.project_id = p_project AND h.memory_id = ANY(v_memories);
        UPDATE public.memory_memory m SET replaced_by_id = NULL
        WHERE m.project_id = p_project AND m.replaced_by_id = ANY(v_memories)
          AND NOT (m.id = ANY(v_memories));
        DELETE FROM public.memory_memory m
        WHERE m.project_id = p_project AND m.id = ANY(v_memories);
    END IF;

    -- A retention run that found nothing leaves no record (it runs daily in every project).
    SELECT coalesce(sum(value::bigint), 0) INTO v_total FROM jsonb_each_text(v_counts);
    IF p_subject_kind = 'memory' OR v_total > 0 THEN
        INSERT INTO public.audit_purgerecord
            (id, project_id, subject_kind, subject_hash, counts, actor, created_at)
        VALUES (gen_random_uuid(), p_project, p_subject_kind, p_subject_hash, v_counts, p_actor,
                clock_timestamp());
    END IF;
    PERFORM set_config('engram.erasing', 'off', true);
    RETURN v_counts;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0013_erase_user_idempotency"),
        ("memory", "0018_conversation"),
    ]

    operations = [
        migrations.RunSQL(
            [ERASE_MEMORIES, f"REVOKE ALL ON FUNCTION {SIGNATURE} FROM PUBLIC"],
            reverse_sql=[_0012.ERASE_MEMORIES, f"REVOKE ALL ON FUNCTION {SIGNATURE} FROM PUBLIC"],
        ),
    ]
