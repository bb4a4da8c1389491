"""Purge records and the one database-side erasure path (GDPR, issue #10)."""

import uuid

import django.db.models.deletion
from django.db import migrations, models

from tenants.db import enable_row_level_security

# The append-only trigger, now with one way through: the erasure function below. A row may be
# changed only while `engram.erasing` is on (the function sets it while it works) AND by
# the table's owner (current_user inside the SECURITY DEFINER function). The application role
# has no UPDATE or DELETE privilege on these tables anyway; that stays the first wall. A
# trigger created with the argument 'always' (the purge records) refuses even the erasure.
APPEND_ONLY_FUNCTION = """
CREATE OR REPLACE FUNCTION engram_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_NARGS = 0
       AND current_setting('engram.erasing', true) = 'on'
       AND current_user = (SELECT pg_catalog.pg_get_userbyid(c.relowner)
                           FROM pg_catalog.pg_class c WHERE c.oid = TG_RELID)
    THEN
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;
"""

PREVIOUS_APPEND_ONLY_FUNCTION = """
CREATE OR REPLACE FUNCTION engram_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;
"""

ERASE_SIGNATURE = "engram_erase_user(uuid, text, text, text, boolean)"

# One user of one project, erased from every store in one transaction (the caller's).
# Deleted: memories (with their embeddings and keyword documents), their feedback and entity
# links (memory_memoryentity: of the user or of those memories), the history rows of the user
# or of those memories, the user's scope summaries, the user's add requests
# (events: payloads and results), the queue messages whose first argument is one of those
# events, and every export whose filters name the user or whose result holds one of the user's
# memories (an export is a snapshot: it is deleted whole, also when it held other users' too).
# Rewritten: in the project's access log, the user id in `scope` (key user_id) and as a path
# segment after /user/ or /users/ becomes 'erased:<subject hash>'. Then one purge record.
# p_dry_run: the same counts, nothing written.
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

    SELECT count(*) INTO n_access FROM public.audit_accesslog a
    WHERE a.project_id = p_project AND (
        (a.scope->'user_id') @> (v_logged_ids->0) OR (a.scope->'user_id') @> (v_logged_ids->1)
        OR a.path ~ v_path_re);

    v_counts := jsonb_build_object(
        'memories', n_memories, 'feedback', n_feedback, 'entity_links', n_entity_links,
        'history', n_history, 'summaries', n_summaries, 'events', n_events,
        'queue_messages', n_queue, 'exports', n_exports, 'access_log', n_access);
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


class Migration(migrations.Migration):
    """The purge record table (append-only, tenant-scoped) and `engram_erase_user`.

    The function is SECURITY DEFINER, owned by the role that runs migrations (the owner), so
    the application role can erase a user without any privilege on the append-only tables:
    it may only EXECUTE the function (tenants.db.grant_runtime_privileges grants that). The
    owner is subject to row-level security too (FORCE), so the function works in the caller's
    tenant context and refuses to run for another project; it needs an UPDATE policy on the
    access log, for the owner only.
    """

    dependencies = [
        ("audit", "0007_memoryhistory_moved_to_memory"),
        ("memory", "0012_memoryentity"),
        ("tenants", "0002_current_project_function"),
    ]

    operations = [
        migrations.CreateModel(
            name="PurgeRecord",
            fields=[
                (
                    "id",
                    models.UUIDField(
                        default=uuid.uuid4, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("subject_kind", models.CharField(choices=[("user", "User")], max_length=20)),
                ("subject_hash", models.CharField(max_length=64)),
                ("counts", models.JSONField(default=dict)),
                ("actor", models.CharField(max_length=200)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "project",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="tenants.project",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["project", "created_at"], name="purgerecord_project_time"),
                    models.Index(fields=["subject_hash"], name="purgerecord_subject"),
                ],
            },
        ),
        migrations.RunSQL(
            "CREATE TRIGGER purgerecord_append_only BEFORE UPDATE OR DELETE ON audit_purgerecord "
            "FOR EACH ROW EXECUTE FUNCTION engram_refuse_change('always')",
            reverse_sql="DROP TRIGGER IF EXISTS purgerecord_append_only ON audit_purgerecord",
        ),
        enable_row_level_security("audit_purgerecord"),
        migrations.RunSQL(APPEND_ONLY_FUNCTION, reverse_sql=PREVIOUS_APPEND_ONLY_FUNCTION),
        migrations.RunSQL(
            [
                # The access log has SELECT and INSERT policies only: UPDATE, for the owner
                # (the erasure function), in the tenant's rows.
                "CREATE POLICY erasure ON audit_accesslog FOR UPDATE TO CURRENT_USER "
                "USING (project_id = engram_current_project()) "
                "WITH CHECK (project_id = engram_current_project())",
                ERASE_FUNCTION,
                f"REVOKE ALL ON FUNCTION {ERASE_SIGNATURE} FROM PUBLIC",
            ],
            reverse_sql=[
                f"DROP FUNCTION IF EXISTS {ERASE_SIGNATURE}",
                "DROP POLICY IF EXISTS erasure ON audit_accesslog",
            ],
        ),
    ]
