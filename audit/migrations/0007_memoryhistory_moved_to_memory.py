"""MemoryHistory now belongs to the memory app (memory 0010 renamed its table)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0006_accesslog_client_fields_operator_rows"),
        ("memory", "0010_memoryhistory"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="MemoryHistory")],
        ),
    ]
