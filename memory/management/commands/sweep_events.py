"""Re-send add requests that no queue message will deliver any more.

An event is stale when it stayed PENDING longer than --pending-seconds, or is RUNNING under an
expired lease (its worker died). It is re-sent only if dramatiq-postgres's queue holds no message
for it, which the sweeper asks the queue itself (memory.extraction.sweep.events_in_queue):

- dramatiq-postgres keeps every live message as one row of `dramatiq.queue`, keyed by its
  message id, with the actor's arguments (event id first) in its JSON: 'queued' while it waits,
  delayed ones included (they sit in the ".DQ" queue until their available_at); 'consumed' while
  a worker holds it, and put back to 'queued' by the broker's reaper if that worker stops
  heartbeating; deleted once acknowledged, 'rejected' once failed.
- A retry re-queues the very message it is running (extraction.tasks), so an event's message keeps
  one id from its first send to its last attempt.

So the queue table is the single source of truth on whether a message is in flight, and it
is checked at the moment of sending. Recording on the event when it was last sent would be a
second copy that can disagree with it: a send that fails after the record is written, a
message the broker re-queues or deletes on its own. An event whose worker died is therefore
left to the broker's reaper as long as the worker's message exists; the sweeper covers messages
that are gone (a send lost when the broker was unreachable, a message that failed outright),
and messages a live worker has held past an event's lease (it lost its database mid-message, as
in a failover, and could neither record the attempt nor acknowledge the message).

With --loop, a pass that fails (the database restarting, a failover) is logged and the next
one comes at its time, on new connections: the sweeper outlives what it is there to repair.

Sweeps hold an advisory lock, so two sweepers never both re-send the same event.

The same loop does the server's other periodic work, so one sweeper process is all it needs:
webhook deliveries no message will bring are sent again (webhooks.sweep, the same rule over the
same queue table), and user profiles whose memories changed are rebuilt once the debounce
delay has passed (memory.extraction.profiles.refresh_due).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import connections

from memory.extraction.profiles import refresh_due
from memory.extraction.sweep import sweep
from webhooks.sweep import sweep as sweep_deliveries

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Re-send events that stayed PENDING longer than --pending-seconds, or whose worker's "
        "lease expired, and that have no message queued, delayed or held by a worker; the "
        "same for webhook deliveries due that long; and send a rebuild for each user profile "
        "whose memories changed ENGRAM_PROFILE_DEBOUNCE_SECONDS ago or more. With --loop N, "
        "repeat every N seconds (make run does this)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pending-seconds", type=int, default=60)
        parser.add_argument("--loop", type=int, default=0, help="repeat every N seconds")

    def handle(self, *args: Any, **options: Any) -> None:
        while True:
            if not options["loop"]:
                self._pass(options)
                return
            try:
                self._pass(options)
            except Exception:  # the loop must outlive an outage: the next pass retries
                logger.warning("sweep failed; the next one in %s s", options["loop"], exc_info=True)
                connections.close_all()
            time.sleep(options["loop"])

    def _pass(self, options: dict[str, Any]) -> None:
        stale = timedelta(seconds=options["pending_seconds"])
        sent = sweep(stale)
        if sent and options["verbosity"] > 0:
            self.stdout.write(f"re-sent {sent} events")
        delivered = sweep_deliveries(stale)
        if delivered and options["verbosity"] > 0:
            self.stdout.write(f"re-sent {delivered} webhook deliveries")
        refreshed = refresh_due()
        if refreshed and options["verbosity"] > 0:
            self.stdout.write(f"sent {refreshed} profile refreshes")
