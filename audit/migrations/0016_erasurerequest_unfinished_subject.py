"""The erasure requests not yet done, by user (their id in clear is kept until then): the
webhooks' outbox trigger (webhooks 0002) and the rendering of a delivery ask whether the user of
a memory change has an erasure asked, so that nothing of theirs is sent but memory ids."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0015_erase_profiles'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='erasurerequest',
            index=models.Index(condition=models.Q(('subject_id', ''), _negated=True), fields=['project', 'subject_id'], name='erasure_unfinished_subject'),
        ),
    ]
