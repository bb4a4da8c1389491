from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        from django.conf import settings
        from django.db.backends.signals import connection_created

        from config import metrics
        from memory import checks  # noqa: F401 - register the start-up checks
        from memory.extraction import broker

        # The broker must exist before the actors are declared (memory.extraction.tasks).
        broker.configure(settings.DATABASES["default"])
        # Each database session counted, and the deadlines its statements meet.
        connection_created.connect(metrics.on_connection_created, dispatch_uid="engram-metrics")
        from memory.extraction import profiles, tasks  # noqa: F401 - declare the actors
