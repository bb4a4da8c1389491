"""The deployment's embedding model, recorded (EmbeddingSpace), and vector columns of any
dimension.

- memory_embeddingspace: the first migrate records the settings' model as the `current` space
  (an existing deployment's vectors are checked to have its dimension);
- memory_memory.embedding and memory_entityvector.embedding lose their fixed dimension
  (`vector`, no rewrite); the HNSW index is rebuilt on the cast to the space's dimension,
  `(embedding::vector(N))`, which search repeats;
- each table gets `embedding_next` (another model's vector, while `manage.py reembed` builds
  it) and `embedded_at` (when the vector was last written), kept by a trigger: a vector written
  clears its twin, which reembed then builds again. Both are SQL only, outside the models.
"""

import pgvector.django.vector
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import migrations, models

TABLES = ("memory_memory", "memory_entityvector")

# The vector comparison is in the body, under a fixed search_path: a trigger's WHEN clause is
# restored by pg_restore with an empty search_path, where pgvector's `=` cannot be found.
TRIGGER_FUNCTION = """
CREATE OR REPLACE FUNCTION engram_embedding_written() RETURNS trigger
LANGUAGE plpgsql SET search_path = public, pg_catalog AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.embedding IS NOT DISTINCT FROM NEW.embedding THEN
        RETURN NEW;
    END IF;
    NEW.embedded_at := clock_timestamp();
    NEW.embedding_next := NULL;
    RETURN NEW;
END
$$;
"""


def install(apps, schema_editor):
    dimensions = settings.EMBEDDING_DIMENSIONS
    hosted = settings.ENGRAM_EMBEDDER == "openai-compatible"
    with schema_editor.connection.cursor() as cursor:
        # The vectors already stored have the columns' old fixed dimension (384).
        cursor.execute(
            "SELECT atttypmod FROM pg_attribute "
            "WHERE attrelid = 'memory_memory'::regclass AND attname = 'embedding'"
        )
        (stored,) = cursor.fetchone()
        # Row-level security applies to the owner too (FORCE): lifted for the count only.
        cursor.execute("ALTER TABLE memory_memory NO FORCE ROW LEVEL SECURITY")
        cursor.execute("SELECT EXISTS (SELECT 1 FROM memory_memory)")
        (has_rows,) = cursor.fetchone()
        cursor.execute("ALTER TABLE memory_memory FORCE ROW LEVEL SECURITY")
        if has_rows and stored > 0 and stored != dimensions:
            raise ImproperlyConfigured(
                f"This database holds vectors of {stored} dimensions, but the settings name a "
                f"model of {dimensions}: migrate with the settings the deployment ran with, then "
                "switch models with `manage.py reembed`."
            )
        cursor.execute("DROP INDEX IF EXISTS memory_embedding_hnsw")
        for table in TABLES:
            cursor.execute(f"ALTER TABLE {table} ALTER COLUMN embedding TYPE vector")
            cursor.execute(
                f"ALTER TABLE {table} ADD COLUMN embedding_next vector, "
                "ADD COLUMN embedded_at timestamptz"
            )
        cursor.execute("ALTER TABLE memory_memory ALTER COLUMN embedding_next SET STORAGE MAIN")
        cursor.execute(
            "CREATE INDEX memory_embedding_hnsw ON memory_memory USING hnsw "
            f"((embedding::vector({int(dimensions)})) vector_cosine_ops) "
            "WITH (m = 16, ef_construction = 64) WHERE state = 'active'"
        )
        cursor.execute(TRIGGER_FUNCTION)
        for table in TABLES:
            cursor.execute(
                f"CREATE TRIGGER {table}_embedding_written "
                f"BEFORE INSERT OR UPDATE OF embedding ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION engram_embedding_written()"
            )
        cursor.execute(
            "INSERT INTO memory_embeddingspace "
            "(name, embedder, url, model, dimensions, send_dimensions, state, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, 'current', now())",
            [
                f"openai-compatible:{settings.ENGRAM_EMBEDDING_MODEL}"
                if hosted
                else f"local:{settings.ENGRAM_LOCAL_MODEL}",
                settings.ENGRAM_EMBEDDER,
                settings.ENGRAM_EMBEDDING_URL if hosted else "",
                settings.ENGRAM_EMBEDDING_MODEL if hosted else settings.ENGRAM_LOCAL_MODEL,
                dimensions,
                settings.ENGRAM_EMBEDDING_SEND_DIMENSIONS if hosted else True,
            ],
        )


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0026_event_warning'),
    ]

    operations = [
        migrations.CreateModel(
            name='EmbeddingSpace',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=300)),
                ('embedder', models.CharField(choices=[('local', 'Local'), ('openai-compatible', 'Openai Compatible')], max_length=20)),
                ('url', models.CharField(blank=True, default='', max_length=2000)),
                ('model', models.CharField(blank=True, default='', max_length=300)),
                ('dimensions', models.PositiveIntegerField()),
                ('send_dimensions', models.BooleanField(default=True)),
                ('state', models.CharField(choices=[('current', 'Current'), ('building', 'Building'), ('retired', 'Retired')], max_length=10)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('switched_at', models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.AddConstraint(
            model_name='embeddingspace',
            constraint=models.UniqueConstraint(condition=models.Q(('state__in', ['current', 'building'])), fields=('state',), name='embedding_space_one_per_state'),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(
                    model_name='memory',
                    name='memory_embedding_hnsw',
                ),
                migrations.AlterField(
                    model_name='entityvector',
                    name='embedding',
                    field=pgvector.django.vector.VectorField(),
                ),
                migrations.AlterField(
                    model_name='memory',
                    name='embedding',
                    field=pgvector.django.vector.VectorField(),
                ),
            ],
            database_operations=[
                migrations.RunPython(install, reverse_code=migrations.RunPython.noop),
            ],
        ),
    ]
