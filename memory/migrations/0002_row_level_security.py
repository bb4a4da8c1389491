from django.db import migrations

from tenants.db import enable_row_level_security


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [
        enable_row_level_security("memory_memory"),
        enable_row_level_security("memory_feedback"),
        enable_row_level_security("memory_memoryexport"),
    ]
