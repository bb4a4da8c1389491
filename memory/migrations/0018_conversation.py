"""Memories remember their conversation across add requests (conversation_id) and the order
they were stored in (seq, from a sequence: messages may share a timestamp).

Adding `seq` with a volatile default rewrites the table once, numbering the existing rows in
their physical order (≈ insertion order); at 1M memories expect tens of seconds.
"""

import django.db.models.expressions
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0017_ensure_graph_race"),
    ]

    operations = [
        migrations.RunSQL(
            "CREATE SEQUENCE IF NOT EXISTS memory_memory_seq",
            reverse_sql="DROP SEQUENCE IF EXISTS memory_memory_seq",
        ),
        migrations.AddField(
            model_name="memory",
            name="conversation_id",
            field=models.UUIDField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="memory",
            name="seq",
            field=models.BigIntegerField(
                db_default=django.db.models.expressions.RawSQL("nextval('memory_memory_seq')", ()),
                editable=False,
            ),
        ),
    ]
