"""The partial index of memories that may say what their first person is called (0022, 0030)
also holds a note's label at its start: "Name: Dana Ruiz", "Customer name: Dana Ruiz", "Full
name Dana Ruiz" (memory.text.recognise own_names reads those now). Its predicate is written out
here and in memory.queries.relations (OWN_NAME_PREDICATE), character for character: the planner
uses the index only for a query whose condition implies it. The new index is built
concurrently under a new name before the old one is dropped, so searches keep an index
throughout and no write waits.
"""

from django.db import migrations

OLD_PREDICATE = (
    "state = 'active' AND ("
    r"text ~* '\m(my|user''s)\s+((first|full|given)\s+)?name(\s+is|''s|\u2019s)\M"
    r"|^\s*name\s+is\M|\mcalls?\s+me\M|\m(i|user)\s+go(es)?\s+by\M"
    r"|\m(i''m|i\u2019m|i\s+am|user\s+is)\s+(called|named)\M"
    r"|\mis\s+my\s+((first|full|given)\s+)?name\M'"
    r" OR text ~ '\m[Ii](''|\u2019)m\s+[[:upper:]]|\m[Ii]\s+am\s+[[:upper:]]')"
)
PREDICATE = (
    "state = 'active' AND ("
    r"text ~* '\m(my|user''s)\s+((first|full|given)\s+)?name(\s+is|''s|\u2019s)\M"
    r"|^\s*((customer|client|member|contact|full|legal|preferred)\s+)?name(\s*:|\s+is\M)"
    r"|^\s*full\s+name\M|\mcalls?\s+me\M|\m(i|user)\s+go(es)?\s+by\M"
    r"|\m(i''m|i\u2019m|i\s+am|user\s+is)\s+(called|named)\M"
    r"|\mis\s+my\s+((first|full|given)\s+)?name\M'"
    r" OR text ~ '\m[Ii](''|\u2019)m\s+[[:upper:]]|\m[Ii]\s+am\s+[[:upper:]]')"
)
COLUMNS = "ON memory_memory (project_id, user_id, agent_id)"


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("memory", "0031_rerank_usage_day")]

    operations = [
        migrations.RunSQL(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS memory_own_names_v3 {COLUMNS} WHERE {PREDICATE}",
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS memory_own_names_v3",
        ),
        migrations.RunSQL(
            "DROP INDEX CONCURRENTLY IF EXISTS memory_own_names_v2",
            reverse_sql=(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS memory_own_names_v2 {COLUMNS} "
                f"WHERE {OLD_PREDICATE}"
            ),
        ),
    ]
