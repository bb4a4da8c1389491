"""The keyword documents' GIN index dropped: the application could never use it.

Every query the application runs is under row-level security (the app role is neither superuser
nor BYPASSRLS, and the table forces it on its owner). PostgreSQL uses a condition as an index
condition ahead of a policy only when its function is leakproof, and `@@` (ts_match_vq) is not:
the planner reads the scope's rows through the scope's btree index and tests each document
instead, with or without this index (docs/benchmarks.md, "Fourth pass"). `pg_stat_user_indexes`
counted no scan of it in the development database or in the 1M-memory one; it cost 50 MB there,
and every write of a memory's document. Dropped concurrently: reads and writes go on meanwhile.
"""

from django.contrib.postgres.operations import RemoveIndexConcurrently
from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("memory", "0028_embedding_storage_main_again")]

    operations = [
        RemoveIndexConcurrently(
            model_name="memory",
            name="memory_search_gin",
        ),
    ]
