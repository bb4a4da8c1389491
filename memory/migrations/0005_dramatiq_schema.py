from django.db import migrations


def create_queue_schema(apps, schema_editor):  # type: ignore[no-untyped-def]
    from dramatiq_postgres import schema

    from memory.extraction.broker import SCHEMA

    with schema_editor.connection.cursor() as cursor:
        schema.init(cursor, schema=SCHEMA)


class Migration(migrations.Migration):
    """The job queue's tables (dramatiq-postgres), in the schema `dramatiq` of this database."""

    dependencies = [("memory", "0004_memoryevent_row_level_security")]

    operations = [
        migrations.RunPython(create_queue_schema, migrations.RunPython.noop),
    ]
