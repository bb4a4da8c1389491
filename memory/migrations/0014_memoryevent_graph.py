from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memory", "0013_idempotentrequest")]

    operations = [
        migrations.AddField(
            model_name="memoryevent",
            name="graph",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
