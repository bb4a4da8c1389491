# An add request whose user messages state something in the first person but whose extraction
# found no fact at all is finished with a warning (memory.extraction.pipeline.NOTHING_EXTRACTED),
# so a model that is not working is seen rather than silent. Earlier requests have none.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0025_profiles"),
    ]

    operations = [
        migrations.AddField(
            model_name="memoryevent",
            name="warning",
            field=models.TextField(blank=True, default=""),
        ),
    ]
