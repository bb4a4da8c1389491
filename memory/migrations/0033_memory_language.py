"""Keywords in each memory's language (memory.text.language).

- Memory.language: the text's language (ISO 639-1), detected for every stored memory here and
  by the actions from now on.
- engram_text_config(code): the language's text-search configuration (PostgreSQL's Snowball
  stemmers), `simple` for any other; a copy of memory.text.language.CONFIGURATIONS.
- engram_keyword_text(text): Chinese, Japanese and Korean runs cut into overlapping character
  pairs (one character alone stays as it is), as Lucene's CJK analyser does; any other text
  comes back unchanged. The same function analyses the search queries.
- search_vector is generated from both (PostgreSQL 17's SET EXPRESSION): the table is rewritten
  and its indexes rebuilt once, under an exclusive lock (docs/operations.md, "Upgrades").
"""

from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import migrations, models
from django.db.models import F, Func

CONFIGURATIONS = {
    "ar": "arabic",
    "hy": "armenian",
    "eu": "basque",
    "ca": "catalan",
    "da": "danish",
    "nl": "dutch",
    "en": "english",
    "fi": "finnish",
    "fr": "french",
    "de": "german",
    "el": "greek",
    "hi": "hindi",
    "hu": "hungarian",
    "id": "indonesian",
    "ga": "irish",
    "it": "italian",
    "lt": "lithuanian",
    "ne": "nepali",
    "no": "norwegian",
    "pt": "portuguese",
    "ro": "romanian",
    "ru": "russian",
    "sr": "serbian",
    "es": "spanish",
    "sv": "swedish",
    "ta": "tamil",
    "tr": "turkish",
}
_CASES = " ".join(f"WHEN '{code}' THEN '{name}'::regconfig" for code, name in CONFIGURATIONS.items())
TEXT_CONFIG = f"""
CREATE OR REPLACE FUNCTION engram_text_config(code text) RETURNS regconfig
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE code {_CASES} ELSE 'simple'::regconfig END
$$;
"""
# Han (with the iteration mark), kana, Hangul syllables and jamo.
CJK = r"\u3005\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"
KEYWORD_TEXT = f"""
CREATE OR REPLACE FUNCTION engram_keyword_text(t text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN t !~ '[{CJK}]' THEN t ELSE (
        SELECT string_agg(
            CASE
                WHEN r.m[1] IS NULL THEN r.m[2]
                WHEN length(r.m[1]) = 1 THEN r.m[1]
                ELSE (
                    SELECT string_agg(substr(r.m[1], i, 2), ' ' ORDER BY i)
                    FROM generate_series(1, length(r.m[1]) - 1) AS i
                )
            END, ' ' ORDER BY r.n)
        FROM regexp_matches(t, '([{CJK}]+)|([^{CJK}]+)', 'g') WITH ORDINALITY AS r(m, n)
    ) END
$$;
"""


def _keywords(column, weight):
    return SearchVector(
        Func(F(column), function="engram_keyword_text", output_field=models.TextField()),
        weight=weight,
        config=Func(F("language"), function="engram_text_config", output_field=models.TextField()),
    )


def _part(column, weight):
    return (
        f"setweight(to_tsvector(engram_text_config(\"language\")::regconfig, "
        f"COALESCE(engram_keyword_text(\"{column}\"), '')), '{weight}')"
    )


EXPRESSION = (
    f"(({_part('text', 'A')} || {_part('context_before', 'B')}) || {_part('context_after', 'C')})"
)
OLD_EXPRESSION = (
    "((setweight(to_tsvector('english'::regconfig, COALESCE(\"text\", '')), 'A') || "
    "setweight(to_tsvector('english'::regconfig, COALESCE(\"context_before\", '')), 'B')) || "
    "setweight(to_tsvector('english'::regconfig, COALESCE(\"context_after\", '')), 'C'))"
)
BATCH = 2000


def detect_languages(apps, schema_editor):
    from memory.text.language import detect

    with schema_editor.connection.cursor() as cursor:
        # Row-level security applies to the owner too (FORCE): lifted for the backfill only.
        cursor.execute("ALTER TABLE memory_memory NO FORCE ROW LEVEL SECURITY")
        last = None
        while True:
            cursor.execute(
                "SELECT id, text FROM memory_memory WHERE (%s::uuid IS NULL OR id > %s::uuid) "
                "ORDER BY id LIMIT %s",
                [last, last, BATCH],
            )
            rows = cursor.fetchall()
            if not rows:
                break
            cursor.execute(
                "UPDATE memory_memory m SET language = v.language "
                "FROM unnest(%s::uuid[], %s::text[]) AS v(id, language) WHERE m.id = v.id",
                [[row[0] for row in rows], [detect(row[1]) for row in rows]],
            )
            last = rows[-1][0]
        cursor.execute("ALTER TABLE memory_memory FORCE ROW LEVEL SECURITY")


class Migration(migrations.Migration):
    dependencies = [("memory", "0032_own_name_index_labels")]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="language",
            field=models.CharField(blank=True, default="", max_length=8),
        ),
        migrations.RunSQL(
            TEXT_CONFIG + KEYWORD_TEXT,
            reverse_sql="DROP FUNCTION engram_keyword_text(text); DROP FUNCTION engram_text_config(text);",
        ),
        migrations.RunPython(detect_languages, migrations.RunPython.noop),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f"ALTER TABLE memory_memory ALTER COLUMN search_vector SET EXPRESSION AS ({EXPRESSION})",
                    reverse_sql=(
                        "ALTER TABLE memory_memory ALTER COLUMN search_vector "
                        f"SET EXPRESSION AS ({OLD_EXPRESSION})"
                    ),
                )
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="memory",
                    name="search_vector",
                    field=models.GeneratedField(
                        db_persist=True,
                        expression=_keywords("text", "A")
                        + _keywords("context_before", "B")
                        + _keywords("context_after", "C"),
                        output_field=SearchVectorField(),
                    ),
                )
            ],
        ),
    ]
