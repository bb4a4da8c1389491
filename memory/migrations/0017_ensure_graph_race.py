"""engram_ensure_graph: two first uses of a project's graph at once no longer fail.

The second caller waited on the advisory lock, then checked again with to_regnamespace(),
which reads the backend's catalog cache: it could still miss the schema the first caller had
just committed, and create_graph() then failed with "graph … already exists". The check after
the lock now reads pg_namespace with the statement's own snapshot, which sees that commit.
"""

from importlib import import_module

from django.db import migrations

_BEFORE = import_module("memory.migrations.0012_memoryentity").ENSURE_GRAPH
_STALE_CHECK = """    IF to_regnamespace(g) IS NULL THEN  -- AGE keeps each graph in a schema of its name
        PERFORM ag_catalog.create_graph(g::name);"""
_FRESH_CHECK = """    -- After the lock, a fresh read: to_regnamespace() may answer from a stale catalog cache.
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = g) THEN
        PERFORM ag_catalog.create_graph(g::name);"""
if _BEFORE.count(_STALE_CHECK) != 1:
    raise RuntimeError("engram_ensure_graph's text changed: update this migration")
ENSURE_GRAPH = _BEFORE.replace(_STALE_CHECK, _FRESH_CHECK)


class Migration(migrations.Migration):
    dependencies = [("memory", "0016_redacted")]

    operations = [migrations.RunSQL(ENSURE_GRAPH, reverse_sql=_BEFORE)]
