"""Embeddings stored in the row again (0019), after 0027's change of the column's type.

`ALTER COLUMN embedding TYPE vector` (0027) resets a column's storage to its type's default, and
pgvector's is EXTERNAL: from then on every vector was written out of line, in TOAST, and an exact
scan of a scope read about three more buffers per row (0019 has the figures). MAIN keeps it in
the row unless the row cannot fit a page. Only rows written from now on change; `VACUUM FULL
memory_memory` (or pg_repack) rewrites the existing ones.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memory", "0027_embedding_space")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE memory_memory ALTER COLUMN embedding SET STORAGE MAIN",
            reverse_sql="ALTER TABLE memory_memory ALTER COLUMN embedding SET STORAGE EXTERNAL",
        )
    ]
