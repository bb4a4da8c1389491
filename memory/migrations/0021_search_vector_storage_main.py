"""Keyword documents stored in the row, not in TOAST, as the embeddings are (0019).

Search reads the tsvector of every memory of a scope (BM25's statistics: memory.retrieval.search),
and a memory with its neighbouring messages' words passes the 2 kB TOAST threshold: the default
storage (EXTENDED) moved the tsvector, about 500 bytes, out of line, and each read cost about
three more buffers (a 629-memory scope: 2,071 buffers against 327 inline; 0.7 ms of a 10 ms
search statement, measured on LoCoMo's scopes with bench-like data). MAIN keeps it in the row
unless the row cannot fit a page; the text, its context and the metadata go out of line first.
Only rows written from now on change; `VACUUM FULL memory_memory` (or pg_repack) rewrites the
existing ones.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memory", "0020_entityvector")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE memory_memory ALTER COLUMN search_vector SET STORAGE MAIN",
            reverse_sql="ALTER TABLE memory_memory ALTER COLUMN search_vector SET STORAGE EXTENDED",
        )
    ]
