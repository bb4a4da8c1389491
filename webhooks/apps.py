from __future__ import annotations

from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    verbose_name = "Webhooks"

    def ready(self) -> None:
        # After memory's ready() (INSTALLED_APPS order), which made the broker current.
        from webhooks import tasks  # noqa: F401 - declares the actor
