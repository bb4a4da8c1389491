from django.db import migrations

from tenants.db import enable_row_level_security


class Migration(migrations.Migration):
    dependencies = [("memory", "0006_scopesummary")]

    operations = [enable_row_level_security("memory_scopesummary")]
