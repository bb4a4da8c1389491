from django.db import migrations

from tenants.db import enable_row_level_security


class Migration(migrations.Migration):
    """Memory history is append-only for every role (engram_refuse_change from 0002)."""

    dependencies = [("audit", "0004_memoryhistory_memory_memoryhistory_project_and_more")]

    operations = [
        migrations.RunSQL(
            "CREATE TRIGGER memoryhistory_append_only BEFORE UPDATE OR DELETE "
            "ON audit_memoryhistory FOR EACH ROW EXECUTE FUNCTION engram_refuse_change()",
            reverse_sql="DROP TRIGGER IF EXISTS memoryhistory_append_only ON audit_memoryhistory",
        ),
        enable_row_level_security("audit_memoryhistory"),
    ]
