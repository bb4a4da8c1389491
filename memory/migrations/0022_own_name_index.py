"""The memories that say what their first person is called, indexed for search.

Inside a scope, search reads the names its own user goes by ("My name is Dana.", "I'm Theo.":
memory.queries.own_names) before every search that pins a user or an agent. This partial index
holds only the active memories whose text has such a form (a superset of what
memory.text.recognise.own_names reads, tested to stay one), by scope, so that read visits a
handful of rows instead of every memory linked to a name the query has (a LoCoMo speaker's
name: 150 links and 3.5-10 ms; now under 0.5 ms). The predicate is written out here and in
memory.queries.relations (OWN_NAME_PREDICATE), character for character: the planner uses the
index only for a query whose condition implies it. Built concurrently: adding it locks no writes.
"""

from django.db import migrations

PREDICATE = (
    "state = 'active' AND ("
    r"text ~* '\m(my|user''s)\s+((first|full|given)\s+)?name(\s+is|''s|\u2019s)\M"
    r"|^\s*name\s+is\M|\mcalls?\s+me\M|\m(i|user)\s+go(es)?\s+by\M"
    r"|\m(i''m|i\u2019m|i\s+am|user\s+is)\s+(called|named)\M'"
    r" OR text ~ '\m[Ii](''|\u2019)m\s+[[:upper:]]|\m[Ii]\s+am\s+[[:upper:]]')"
)


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("memory", "0021_search_vector_storage_main")]

    operations = [
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS memory_own_names "
            f"ON memory_memory (project_id, user_id, agent_id) WHERE {PREDICATE}",
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS memory_own_names",
        )
    ]
