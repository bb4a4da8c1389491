"""Embeddings stored in the row, not in TOAST (bench/scale.py, 1M memories).

A 384-dimension vector is 1,544 bytes, so a memory with some text passes the 2 kB TOAST
threshold and pgvector's default storage (EXTERNAL) moved the vector out of line: an exact scan of
a scope then read about three more buffers per row (31k rows: 154 ms against 38 ms inline).
MAIN keeps it in the row unless the row cannot fit a page. Only rows written from now on change;
`VACUUM FULL memory_memory` (or pg_repack) rewrites the existing ones.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memory", "0018_conversation")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE memory_memory ALTER COLUMN embedding SET STORAGE MAIN",
            reverse_sql="ALTER TABLE memory_memory ALTER COLUMN embedding SET STORAGE EXTERNAL",
        )
    ]
