from django.db import migrations

from tenants.db import CURRENT_PROJECT_FUNCTION


class Migration(migrations.Migration):
    """engram_current_project(): the tenant of the current transaction, used by every RLS policy."""

    dependencies = [("tenants", "0001_initial")]

    operations = [
        migrations.RunSQL(
            CURRENT_PROJECT_FUNCTION,
            reverse_sql="DROP FUNCTION IF EXISTS engram_current_project()",
        )
    ]
