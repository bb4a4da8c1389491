from django.db import migrations, models

# The sweeper asks the queue whether an event still has a message (memory.extraction.sweep.stale_events):
# index the event id that process_event messages carry as their first argument.
QUEUE_EVENT_INDEX = """
CREATE INDEX IF NOT EXISTS queue_process_event_id ON dramatiq.queue ((message->'args'->>0))
WHERE message->>'actor_name' = 'process_event'
"""


class Migration(migrations.Migration):
    """Claim tokens on events, and the queue index the sweeper's duplicate check uses."""

    dependencies = [("memory", "0008_memoryevent_scope")]

    operations = [
        migrations.AddField(
            model_name="memoryevent",
            name="claim_id",
            field=models.UUIDField(blank=True, editable=False, null=True),
        ),
        migrations.RunSQL(
            QUEUE_EVENT_INDEX, "DROP INDEX IF EXISTS dramatiq.queue_process_event_id"
        ),
    ]
