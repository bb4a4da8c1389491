"""Entry point of the Dramatiq worker: `dramatiq config.worker` (make run starts one).

Boots Django, which configures the broker and declares the actors (memory/apps.py), then
has the worker processes restarted after ENGRAM_WORKER_MAX_TASKS messages each.

Start it with the `dramatiq` command of the virtualenv (as `make run` and the Docker image
do): the command restarts its processes by running itself again, and `python -m dramatiq`
would run whichever `python` comes first on PATH.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
import time
from typing import Any

import django
import dramatiq
from dramatiq.broker import MessageProxy

from config import metrics, tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

logger = logging.getLogger(__name__)


class RecycleAfter(dramatiq.Middleware):
    """Ask the dramatiq command to restart its worker processes after `limit` messages here.

    On SIGHUP the command has every worker process finish the messages it holds and stop,
    then starts again with fresh processes: a backstop against memory a long-lived worker
    gathers. Sent once per process.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.done = 0
        self.lock = threading.Lock()

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        self._count()

    def after_skip_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        self._count()

    def _count(self) -> None:
        with self.lock:
            self.done += 1
            if self.done != self.limit:
                return
        logger.info("worker restarting after %s messages (ENGRAM_WORKER_MAX_TASKS)", self.done)
        os.kill(os.getppid(), signal.SIGHUP)


class Metrics(dramatiq.Middleware):
    """Time each message by actor and outcome (config.metrics JOBS); with ENGRAM_METRICS_BIND,
    fork the metrics listener (config.metrics_server), once, from the dramatiq command's
    master process."""

    def __init__(self, listen: bool) -> None:
        self.listen = listen
        self.started: dict[str, float] = {}
        self.spans: dict[str, tracing.Consumed] = {}
        self.lock = threading.Lock()

    @property
    def forks(self) -> list[Any]:
        from config.metrics_server import serve

        return [serve] if self.listen else []

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        with self.lock:
            self.started[message.message_id] = time.perf_counter()
        sent = {k: v for k, v in message.options.items() if k in ("traceparent", "tracestate")}
        span = tracing.consumed(
            message.actor_name,
            sent,
            {"messaging.system": "dramatiq", "messaging.destination.name": message.queue_name},
        )
        if span is not None:
            with self.lock:
                self.spans[message.message_id] = span

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        with self.lock:
            started = self.started.pop(message.message_id, None)
            span = self.spans.pop(message.message_id, None)
        if span is not None:
            span.end(exception)
        if started is not None:
            outcome = "done" if exception is None else "error"
            metrics.JOBS.labels(actor=message.actor_name, outcome=outcome).observe(
                time.perf_counter() - started
            )

    def after_skip_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        with self.lock:
            self.started.pop(message.message_id, None)
            span = self.spans.pop(message.message_id, None)
        if span is not None:
            span.end(None)


def recycle_after(limit: int) -> None:
    """Restart the workers after `limit` messages (0: never), plus up to a tenth more at
    random, so that several processes do not all ask at once."""
    if limit:
        jitter = random.randint(0, limit // 10)  # noqa: S311 - spreading, not security
        dramatiq.get_broker().add_middleware(RecycleAfter(limit + jitter))


# Only in the processes the dramatiq command starts: this module is their entry point.
from django.conf import settings  # noqa: E402 - after django.setup()

recycle_after(settings.ENGRAM_WORKER_MAX_TASKS)
dramatiq.get_broker().add_middleware(Metrics(listen=bool(settings.ENGRAM_METRICS_BIND)))
tracing.start("engram-worker")  # when OpenTelemetry's variables ask for it
