from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        from django.conf import settings

        from memory import checks  # noqa: F401 - register the start-up checks
        from memory.extraction import broker

        # The broker must exist before the actors are declared (memory.extraction.tasks).
        broker.configure(settings.DATABASES["default"])
        from memory.extraction import profiles, tasks  # noqa: F401 - declare the actors
