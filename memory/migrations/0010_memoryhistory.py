"""MemoryHistory moves from the audit app to memory, with its rows (issue #8).

The table is renamed, not copied: rows, indexes, the append-only trigger and the row-level
security policy go with it. audit 0007 removes the model from the audit app's state.
"""

import uuid

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0006_accesslog_client_fields_operator_rows"),
        ("memory", "0009_memoryevent_claim_id"),
        ("tenants", "0002_current_project_function"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    "ALTER TABLE audit_memoryhistory RENAME TO memory_memoryhistory",
                    reverse_sql="ALTER TABLE memory_memoryhistory RENAME TO audit_memoryhistory",
                ),
            ],
            state_operations=[
                migrations.CreateModel(
                    name="MemoryHistory",
                    fields=[
                        ("user_id", models.CharField(blank=True, max_length=255, null=True)),
                        ("agent_id", models.CharField(blank=True, max_length=255, null=True)),
                        ("app_id", models.CharField(blank=True, max_length=255, null=True)),
                        ("run_id", models.CharField(blank=True, max_length=255, null=True)),
                        ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                        ("event", models.CharField(choices=[("ADD", "Add"), ("UPDATE", "Update"), ("DELETE", "Delete")], max_length=10)),
                        ("old_memory", models.TextField(blank=True, null=True)),
                        ("new_memory", models.TextField(blank=True, null=True)),
                        ("actor", models.CharField(max_length=200)),
                        ("event_id", models.UUIDField(blank=True, null=True)),
                        ("input", models.JSONField(blank=True, default=list)),
                        ("metadata", models.JSONField(blank=True, default=dict)),
                        ("categories", models.JSONField(blank=True, default=list)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("memory", models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name="history", to="memory.memory")),
                        ("project", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+", to="tenants.project")),
                    ],
                    options={
                        "db_table": "memory_memoryhistory",
                        "indexes": [models.Index(fields=["memory", "created_at"], name="history_memory_time")],
                    },
                ),
            ],
        ),
    ]
