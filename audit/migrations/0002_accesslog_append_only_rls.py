from django.db import migrations

APPEND_ONLY_FUNCTION = """
CREATE OR REPLACE FUNCTION engram_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;
"""


class Migration(migrations.Migration):
    """The access log is append-only for every role, and tenant-scoped by row-level security.

    Authenticated requests are logged under their project. Unauthenticated ones (bad or missing
    key) have no project: they may be inserted without a tenant context, but no tenant can read
    them back; operators read them as the owner/superuser.
    """

    dependencies = [
        ("audit", "0001_initial"),
        ("tenants", "0002_current_project_function"),
    ]

    operations = [
        migrations.RunSQL(
            [
                APPEND_ONLY_FUNCTION,
                "CREATE TRIGGER accesslog_append_only BEFORE UPDATE OR DELETE ON audit_accesslog "
                "FOR EACH ROW EXECUTE FUNCTION engram_refuse_change()",
                "ALTER TABLE audit_accesslog ENABLE ROW LEVEL SECURITY",
                "ALTER TABLE audit_accesslog FORCE ROW LEVEL SECURITY",
                "CREATE POLICY project_isolation ON audit_accesslog FOR SELECT "
                "USING (project_id = engram_current_project())",
                "CREATE POLICY project_insert ON audit_accesslog FOR INSERT "
                "WITH CHECK (project_id IS NOT DISTINCT FROM engram_current_project())",
            ],
            reverse_sql=[
                "DROP POLICY IF EXISTS project_insert ON audit_accesslog",
                "DROP POLICY IF EXISTS project_isolation ON audit_accesslog",
                "ALTER TABLE audit_accesslog NO FORCE ROW LEVEL SECURITY",
                "ALTER TABLE audit_accesslog DISABLE ROW LEVEL SECURITY",
                "DROP TRIGGER IF EXISTS accesslog_append_only ON audit_accesslog",
                "DROP FUNCTION IF EXISTS engram_refuse_change()",
            ],
        )
    ]
