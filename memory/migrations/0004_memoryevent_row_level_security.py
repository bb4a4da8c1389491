from django.db import migrations

from tenants.db import enable_row_level_security


class Migration(migrations.Migration):
    dependencies = [("memory", "0003_memoryevent")]

    operations = [enable_row_level_security("memory_memoryevent")]
