from __future__ import annotations

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self) -> None:
        from django.conf import settings

        from memory import broker

        # The broker must exist before the actors are declared (memory.tasks).
        broker.configure(settings.DATABASES["default"])
        from memory import tasks  # noqa: F401 - declares the actors
