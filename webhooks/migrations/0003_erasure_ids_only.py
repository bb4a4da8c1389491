"""A user whose erasure is asked is reported by memory ids only (#47).

The API's user delete and the end user's own erasure hide the user's memories at once (DELETE
history rows) and record an erasure request that a worker carries out later; until then the
history rows still hold the texts and the user's id. So the trigger on memory_memoryhistory,
for a row of a user with an erasure request PENDING (audit_erasurerequest, its id in clear kept
until the erasure is done; audit 0016 indexes it):

- a change that removes a memory (DELETE, REDACT, a REVERT that removes it) is a memory_delete
  that names no history row, only the memory: its body (webhooks.render) is the memory's id,
  with no text, scope ids, metadata or categories, and it needs no row the erasure deletes;
- any other change reports nothing (a memory added meanwhile is erased with the rest).

So an erasure sends one ids-only memory_delete per memory it hides and per subscribed webhook,
then erasure_complete. The function's whole text is here; the reverse restores 0001's.
"""

import importlib

from django.db import migrations

HISTORY_OUTBOX = r"""
CREATE OR REPLACE FUNCTION webhooks_history_outbox() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp
AS $fn$
DECLARE
    v_type text;
    v_before jsonb;
BEGIN
    -- An import (import_project, import_mem0) writes history that happened elsewhere, maybe
    -- years ago: it sets engram.importing for its transaction, and nothing is reported.
    IF current_setting('engram.importing', true) = 'on' THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM public.webhooks_webhook w
                   WHERE w.project_id = NEW.project_id AND w.enabled) THEN
        RETURN NULL;
    END IF;
    v_type := CASE
        WHEN NEW.event = 'ADD' THEN 'memory_add'
        WHEN NEW.event IN ('UPDATE', 'RESTORE') THEN 'memory_update'
        WHEN NEW.event IN ('DELETE', 'REDACT') THEN 'memory_delete'
        WHEN NEW.event = 'REVERT' AND NEW.new_memory IS NULL THEN 'memory_delete'
        WHEN NEW.event = 'REVERT' THEN 'memory_update'
    END;
    -- The user's erasure is asked (module doc): a removal by the memory's id alone, else nothing.
    IF NEW.user_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM public.audit_erasurerequest r
        WHERE r.project_id = NEW.project_id AND r.subject_id = NEW.user_id
          AND r.subject_id <> '' AND r.status = 'PENDING') THEN
        IF v_type = 'memory_delete' THEN
            PERFORM public.webhooks_outbox_add(
                NEW.project_id, v_type, NULL, NEW.memory_id, NULL);
        END IF;
        RETURN NULL;
    END IF;
    IF v_type IS NOT NULL THEN
        PERFORM public.webhooks_outbox_add(NEW.project_id, v_type, NEW.id, NEW.memory_id, NULL);
    END IF;
    IF NEW.new_memory IS NOT NULL AND NEW.event IN ('ADD', 'UPDATE', 'RESTORE', 'REVERT') THEN
        SELECT h.categories INTO v_before FROM public.memory_memoryhistory h
        WHERE h.project_id = NEW.project_id AND h.memory_id = NEW.memory_id AND h.id <> NEW.id
          AND h.created_at <= NEW.created_at
        ORDER BY h.created_at DESC LIMIT 1;
        IF coalesce(v_before, '[]'::jsonb) IS DISTINCT FROM coalesce(NEW.categories, '[]'::jsonb)
        THEN
            PERFORM public.webhooks_outbox_add(
                NEW.project_id, 'memory_categorize', NEW.id, NEW.memory_id, NULL);
        END IF;
    END IF;
    RETURN NULL;
END
$fn$;
"""

# 0001's definition of the same function (its OUTBOX also makes the trigger, which stays).
_INITIAL = importlib.import_module("webhooks.migrations.0001_initial").OUTBOX
PREVIOUS_HISTORY_OUTBOX = _INITIAL[
    _INITIAL.index("CREATE OR REPLACE FUNCTION webhooks_history_outbox()") : _INITIAL.index(
        "CREATE TRIGGER webhooks_history_outbox"
    )
]


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0016_erasurerequest_unfinished_subject'),
        ('webhooks', '0002_webhook_created_by_key'),
    ]

    operations = [
        migrations.RunSQL(HISTORY_OUTBOX, reverse_sql=PREVIOUS_HISTORY_OUTBOX),
    ]
