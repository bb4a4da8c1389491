"""Redaction and retention purges clear the erased texts from the keyword context of their whole
stored conversation (issue #14).

Since memory 0018 a raw message's neighbours may have come in other add requests of the same
conversation (turn-by-turn adds), and quote it in their context_before/context_after. The
neighbours engram_erase_memories cleans were those of the same add request; they are now those
of the same request or conversation (memory.conversation_id, or the request id a conversation
started with). Same signature and contract as audit 0012.
"""

from importlib import import_module

from django.db import migrations

_0012 = import_module("audit.migrations.0012_erase_memories")
SIGNATURE = _0012.ERASE_MEMORIES_SIGNATURE
_REPLACEMENTS = [
    (
        "    v_sources uuid[];       -- the add requests (and infer=false batches) they came from\n",
        "    v_sources uuid[];       -- the add requests (and infer=false batches) they came from\n"
        "    v_groups uuid[];        -- those requests and the stored conversations they are in\n",
        1,
    ),
    (
        "    v_ids := v_memories::text[];\n",
        "    v_ids := v_memories::text[];\n"
        "    SELECT coalesce(array_agg(DISTINCT x.g) FILTER (WHERE x.g IS NOT NULL), '{}')\n"
        "      INTO v_groups\n"
        "    FROM (SELECT unnest(v_sources) AS g\n"
        "          UNION ALL SELECT m.conversation_id FROM public.memory_memory m\n"
        "          WHERE m.project_id = p_project AND m.id = ANY(v_memories)) AS x;\n",
        1,
    ),
    (
        "    WHERE m.project_id = p_project AND m.source_event_id = ANY(v_sources)\n"
        "      AND NOT (m.id = ANY(v_memories))\n",
        "    WHERE m.project_id = p_project\n"
        "      AND (m.source_event_id = ANY(v_groups) OR m.conversation_id = ANY(v_groups))\n"
        "      AND NOT (m.id = ANY(v_memories))\n",
        2,
    ),
]
ERASE_MEMORIES = _0012.ERASE_MEMORIES
for _old, _new, _count in _REPLACEMENTS:
    if ERASE_MEMORIES.count(_old) != _count:
        raise RuntimeError("engram_erase_memories' text changed: update this migration")
    ERASE_MEMORIES = ERASE_MEMORIES.replace(_old, _new)


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
