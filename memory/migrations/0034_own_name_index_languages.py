"""The partial index of memories that may say what their first person is called (0022, 0030,
0032) also holds the forms of other languages (memory.text.recognise own_names reads them now):
"Ich heiße Katrin", "Me llamo Rodrigo", "Je m'appelle", "Меня зовут", "اسمي", "मेरा नाम", "我叫",
"名前は", "제 이름은", "佐藤美咲です". Its predicate is written out here and in
memory.queries.relations (OWN_NAME_PREDICATE), character for character: the planner uses the index
only for a query whose condition implies it. The new index is built concurrently under a new name
before the old one is dropped, so searches keep an index throughout and no write waits.
"""

# ruff: noqa: RUF001 (the forms of other languages, in their own scripts)

from django.db import migrations

OLD_PREDICATE = (
    "state = 'active' AND ("
    r"text ~* '\m(my|user''s)\s+((first|full|given)\s+)?name(\s+is|''s|\u2019s)\M"
    r"|^\s*((customer|client|member|contact|full|legal|preferred)\s+)?name(\s*:|\s+is\M)"
    r"|^\s*full\s+name\M|\mcalls?\s+me\M|\m(i|user)\s+go(es)?\s+by\M"
    r"|\m(i''m|i\u2019m|i\s+am|user\s+is)\s+(called|named)\M"
    r"|\mis\s+my\s+((first|full|given)\s+)?name\M'"
    r" OR text ~ '\m[Ii](''|\u2019)m\s+[[:upper:]]|\m[Ii]\s+am\s+[[:upper:]]')"
)
WORLD = (
    r"text ~* '(ich\s+hei(ß|ss)e|mein\s+name\s+ist|me\s+llamo|mi\s+nombre\s+es"
    r"|je\s+m(''|\u2019)appelle|mon\s+nom\s+est|mi\s+chiamo|il\s+mio\s+nome\s+è"
    r"|meu\s+nome\s+é|me\s+chamo|ik\s+heet|mijn\s+naam\s+is"
    r"|[мМ]еня\s+зовут|[мМ]о[её]\s+имя|[мМ]ене\s+звати|मेरा\s+नाम|اسمي"
    r"|我叫|我的名字|我名叫|名前は|[제내]\s*이름은)'"
    r" OR text ~ '^\s*[\u3400-\u4dbf\u4e00-\u9fff\u30a0-\u30ff\uac00-\ud7af]{2,4}"
    r"(です|と申します|といいます)'"
)
# v3's condition with the other languages' forms inside its parentheses.
PREDICATE = OLD_PREDICATE[:-1] + f" OR {WORLD})"
COLUMNS = "ON memory_memory (project_id, user_id, agent_id)"


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("memory", "0033_memory_language")]

    operations = [
        migrations.RunSQL(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS memory_own_names_v4 {COLUMNS} WHERE {PREDICATE}",
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS memory_own_names_v4",
        ),
        migrations.RunSQL(
            "DROP INDEX CONCURRENTLY IF EXISTS memory_own_names_v3",
            reverse_sql=(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS memory_own_names_v3 {COLUMNS} "
                f"WHERE {OLD_PREDICATE}"
            ),
        ),
    ]
