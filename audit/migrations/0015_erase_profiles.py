"""GDPR erasure also reaches user profiles (issue #28): the user's profile row (memory 0025,
an object built from their memories) is deleted, and their id leaves the entity list of every
profile job that names them. Same signature and contract as audit 0013; two more stores in the
counts, `profiles` and `profile_jobs`.

The function's whole text is here (the latest definition); the reverse restores 0013's.
"""

import importlib

from django.db import migrations

ERASE_FUNCTION = r"""
CREATE OR REPLACE FUNCTION engram_erase_user(
    p_project uuid, p_user_id text, p_subject_hash text, p_actor text, p_dry_run boolean
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_memories uuid[];
    v_events text[];
    v_marker text := 'erased:' || p_subject_hash;
    -- The access log keeps at most 200 characters of a scope value (audit.access).
    v_logged_ids jsonb := jsonb_build_array(p_user_id, left(p_user_id, 200));
    -- A path segment equal to the id, right after /user/ or /users/ (/v2/entities/user/<id>/).
    v_path_re text := '(/users?/)' || regexp_replace(p_user_id, '([^[:alnum:]])', '\\\1', 'g')
                      || '(?=/|$)';
    v_vars jsonb := jsonb_build_object('u', p_user_id);  -- for the JSON path queries
    v_counts jsonb;
    n_memories bigint;
    n_feedback bigint;
    n_entity_links bigint;
    n_history bigint;
    n_summaries bigint;
    n_events bigint;
    n_queue bigint;
    n_exports bigint;
    n_access bigint;
    n_idempotency bigint;
    n_profiles bigint;
    n_profile_jobs bigint;
    -- The project's AGE graph (memory.graph.graph_name), when it has one.
    v_graph text := 'g_' || replace(p_project::text, '-', '');
    v_user ag_catalog.agtype;  -- {"user_id": <the id>}, contained by the user's vertices and edges
    v_vertices ag_catalog.graphid[] := '{}';
    v_graph_edges text;  -- the user's edges and every edge touching the user's vertices
    n_graph_entities bigint := 0;
    n_graph_relations bigint := 0;
BEGIN
    IF p_project IS NULL OR coalesce(p_user_id, '') = '' THEN
        RAISE EXCEPTION 'engram_erase_user: a project and a non-empty user id are required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(p_subject_hash, '') !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'engram_erase_user: the subject hash must be 64 hexadecimal digits'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(p_actor, '') = '' OR length(p_actor) > 200 THEN
        RAISE EXCEPTION 'engram_erase_user: an actor of 1 to 200 characters is required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Row-level security binds the owner too (FORCE): the function sees the caller's tenant
    -- only, and refuses to run for any other project.
    IF public.engram_current_project() IS DISTINCT FROM p_project THEN
        RAISE EXCEPTION 'engram_erase_user: run it in the tenant context of project %', p_project
            USING ERRCODE = 'insufficient_privilege';
    END IF;

    SELECT coalesce(array_agg(m.id), '{}') INTO v_memories
    FROM public.memory_memory m
    WHERE m.project_id = p_project AND m.user_id = p_user_id;
    n_memories := cardinality(v_memories);

    SELECT coalesce(array_agg(e.id::text), '{}') INTO v_events
    FROM public.memory_memoryevent e
    WHERE e.project_id = p_project AND e.user_id = p_user_id;
    n_events := cardinality(v_events);

    SELECT count(*) INTO n_feedback FROM public.memory_feedback f
    WHERE f.project_id = p_project AND f.memory_id = ANY(v_memories);

    SELECT count(*) INTO n_entity_links FROM public.memory_memoryentity l
    WHERE l.project_id = p_project AND (l.user_id = p_user_id OR l.memory_id = ANY(v_memories));

    SELECT count(*) INTO n_history FROM public.memory_memoryhistory h
    WHERE h.project_id = p_project AND (h.user_id = p_user_id OR h.memory_id = ANY(v_memories));

    SELECT count(*) INTO n_summaries FROM public.memory_scopesummary s
    WHERE s.project_id = p_project AND s.user_id = p_user_id;

    SELECT count(*) INTO n_queue FROM dramatiq.queue q
    WHERE q.message->'args'->>0 = ANY(v_events);

    SELECT count(*) INTO n_exports FROM public.memory_memoryexport x
    WHERE x.project_id = p_project AND (
        jsonb_path_exists(x.filters, '$.**.user_id.** ? (@ == $u)', v_vars)
        OR jsonb_path_exists(x.result, '$[*] ? (@.user_id == $u)', v_vars)
        OR EXISTS (SELECT 1 FROM jsonb_array_elements(
                       CASE jsonb_typeof(x.result) WHEN 'array' THEN x.result ELSE '[]' END) r
                   WHERE r->>'id' = ANY(v_memories::text[])));

    -- Answers kept for Idempotency-Key replays that name one of the user's memories (an add
    -- stored verbatim answers with the memories, texts included).
    SELECT count(*) INTO n_idempotency FROM public.memory_idempotentrequest i
    WHERE i.project_id = p_project AND i.response IS NOT NULL AND EXISTS (
        SELECT 1 FROM jsonb_path_query(i.response, 'lax $.**.id') AS x(v)
        WHERE x.v #>> '{}' = ANY(v_memories::text[]));

    -- The user's profile (built from their memories) and the profile jobs that name them.
    SELECT count(*) INTO n_profiles FROM public.memory_userprofile p
    WHERE p.project_id = p_project AND p.user_id = p_user_id;
    SELECT count(*) INTO n_profile_jobs FROM public.memory_profilejob j
    WHERE j.project_id = p_project AND p_user_id = ANY(j.entity_ids);

    SELECT count(*) INTO n_access FROM public.audit_accesslog a
    WHERE a.project_id = p_project AND (
        (a.scope->'user_id') @> (v_logged_ids->0) OR (a.scope->'user_id') @> (v_logged_ids->1)
        OR a.path ~ v_path_re);

    -- The graph: every vertex whose user_id property is the user (any scope naming the user),
    -- every edge whose user_id is, and every edge touching one of those vertices (none is
    -- left pointing to a missing vertex). The graph's schema name is formatted in (%I), the
    -- user id is a parameter. Writers of this graph wait from here until the erasure commits
    -- (an edge being made to a vertex erased here would be left dangling).
    IF to_regnamespace(v_graph) IS NOT NULL THEN
        IF p_dry_run IS FALSE THEN
            EXECUTE format('LOCK TABLE %I._ag_label_vertex, %I._ag_label_edge '
                           'IN SHARE ROW EXCLUSIVE MODE', v_graph, v_graph);
        END IF;
        v_user := jsonb_build_object('user_id', p_user_id)::text::ag_catalog.agtype;
        EXECUTE format('SELECT coalesce(array_agg(v.id), ''{}'') FROM %I._ag_label_vertex v '
                       'WHERE v.properties OPERATOR(ag_catalog.@>) $1', v_graph)
            INTO v_vertices USING v_user;
        n_graph_entities := cardinality(v_vertices);
        v_graph_edges := format('%I._ag_label_edge r '
                                'WHERE r.properties OPERATOR(ag_catalog.@>) $1 '
                                'OR r.start_id OPERATOR(ag_catalog.=) ANY($2) '
                                'OR r.end_id OPERATOR(ag_catalog.=) ANY($2)', v_graph);
        EXECUTE 'SELECT count(*) FROM ' || v_graph_edges
            INTO n_graph_relations USING v_user, v_vertices;
    END IF;

    v_counts := jsonb_build_object(
        'memories', n_memories, 'feedback', n_feedback, 'entity_links', n_entity_links,
        'graph_entities', n_graph_entities, 'graph_relations', n_graph_relations,
        'history', n_history, 'summaries', n_summaries, 'events', n_events,
        'queue_messages', n_queue, 'exports', n_exports, 'idempotency', n_idempotency,
        'profiles', n_profiles, 'profile_jobs', n_profile_jobs, 'access_log', n_access);
    IF p_dry_run IS NOT FALSE THEN
        RETURN v_counts;
    END IF;

    -- Lets this function's changes through the append-only triggers (engram_refuse_change),
    -- until it returns; a failure rolls it back with everything else.
    PERFORM set_config('engram.erasing', 'on', true);

    -- Another memory superseded by one of these keeps its row, without the pointer.
    UPDATE public.memory_memory m SET replaced_by_id = NULL
    WHERE m.project_id = p_project AND m.replaced_by_id = ANY(v_memories)
      AND NOT (m.id = ANY(v_memories));
    DELETE FROM public.memory_feedback f
    WHERE f.project_id = p_project AND f.memory_id = ANY(v_memories);
    DELETE FROM public.memory_memoryentity l
    WHERE l.project_id = p_project AND (l.user_id = p_user_id OR l.memory_id = ANY(v_memories));
    IF n_graph_entities + n_graph_relations > 0 THEN
        EXECUTE 'DELETE FROM ' || v_graph_edges USING v_user, v_vertices;
        EXECUTE format('DELETE FROM %I._ag_label_vertex v '
                       'WHERE v.id OPERATOR(ag_catalog.=) ANY($1)', v_graph) USING v_vertices;
    END IF;
    DELETE FROM public.memory_memory m
    WHERE m.project_id = p_project AND m.id = ANY(v_memories);
    DELETE FROM public.memory_memoryhistory h
    WHERE h.project_id = p_project AND (h.user_id = p_user_id OR h.memory_id = ANY(v_memories));
    DELETE FROM public.memory_scopesummary s
    WHERE s.project_id = p_project AND s.user_id = p_user_id;
    DELETE FROM dramatiq.queue q WHERE q.message->'args'->>0 = ANY(v_events);
    DELETE FROM public.memory_memoryevent e
    WHERE e.project_id = p_project AND e.id::text = ANY(v_events);
    DELETE FROM public.memory_memoryexport x
    WHERE x.project_id = p_project AND (
        jsonb_path_exists(x.filters, '$.**.user_id.** ? (@ == $u)', v_vars)
        OR jsonb_path_exists(x.result, '$[*] ? (@.user_id == $u)', v_vars)
        OR EXISTS (SELECT 1 FROM jsonb_array_elements(
                       CASE jsonb_typeof(x.result) WHEN 'array' THEN x.result ELSE '[]' END) r
                   WHERE r->>'id' = ANY(v_memories::text[])));

    DELETE FROM public.memory_idempotentrequest i
    WHERE i.project_id = p_project AND i.response IS NOT NULL AND EXISTS (
        SELECT 1 FROM jsonb_path_query(i.response, 'lax $.**.id') AS x(v)
        WHERE x.v #>> '{}' = ANY(v_memories::text[]));

    DELETE FROM public.memory_userprofile p
    WHERE p.project_id = p_project AND p.user_id = p_user_id;
    -- A job keeps its counts; the user's id leaves its list.
    UPDATE public.memory_profilejob j SET entity_ids = array_remove(j.entity_ids, p_user_id)
    WHERE j.project_id = p_project AND p_user_id = ANY(j.entity_ids);

    UPDATE public.audit_accesslog a SET
        scope = CASE jsonb_typeof(a.scope->'user_id')
            WHEN 'string' THEN CASE WHEN v_logged_ids @> (a.scope->'user_id')
                THEN jsonb_set(a.scope, '{user_id}', to_jsonb(v_marker)) ELSE a.scope END
            WHEN 'array' THEN jsonb_set(a.scope, '{user_id}', (
                SELECT coalesce(jsonb_agg(CASE WHEN v_logged_ids @> jsonb_build_array(v.value)
                                          THEN to_jsonb(v_marker) ELSE v.value END
                                          ORDER BY v.ord), '[]')
                FROM jsonb_array_elements(a.scope->'user_id') WITH ORDINALITY AS v(value, ord)))
            ELSE a.scope END,
        path = regexp_replace(a.path, v_path_re, '\1' || v_marker, 'g')
    WHERE a.project_id = p_project AND (
        (a.scope->'user_id') @> (v_logged_ids->0) OR (a.scope->'user_id') @> (v_logged_ids->1)
        OR a.path ~ v_path_re);

    INSERT INTO public.audit_purgerecord
        (id, project_id, subject_kind, subject_hash, counts, actor, created_at)
    VALUES (gen_random_uuid(), p_project, 'user', p_subject_hash, v_counts, p_actor, now());
    PERFORM set_config('engram.erasing', 'off', true);
    RETURN v_counts;
END $$;
"""

PREVIOUS = importlib.import_module("audit.migrations.0013_erase_user_idempotency")


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0014_erase_memories_conversations"),
        ("memory", "0025_profiles"),
    ]

    operations = [
        # CREATE OR REPLACE keeps the function's owner and grants (EXECUTE for the app role).
        migrations.RunSQL(ERASE_FUNCTION, reverse_sql=PREVIOUS.ERASE_FUNCTION),
    ]
