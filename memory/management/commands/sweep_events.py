"""Re-send add requests whose queue message was lost or whose worker died.

Processing is idempotent (an event is claimed with a conditional update), so a re-sent event
that is in fact still queued or running is harmless.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from memory.actions import stale_events
from memory.tasks import process_event


class Command(BaseCommand):
    help = (
        "Re-send events that stayed PENDING longer than --pending-seconds, or whose worker's "
        "lease expired. With --loop N, repeat every N seconds (make run does this)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pending-seconds", type=int, default=60)
        parser.add_argument("--loop", type=int, default=0, help="repeat every N seconds")

    def handle(self, *args: Any, **options: Any) -> None:
        while True:
            stale = stale_events(timezone.now(), timedelta(seconds=options["pending_seconds"]))
            for event_id, project_id in stale:
                process_event.send(event_id, project_id)
            if stale and options["verbosity"] > 0:
                self.stdout.write(f"re-sent {len(stale)} events")
            if not options["loop"]:
                return
            time.sleep(options["loop"])
