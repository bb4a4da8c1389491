from __future__ import annotations

from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants"

    def ready(self) -> None:
        from django.conf import settings
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate

        from tenants import schema  # noqa: F401 - registers the OpenAPI auth extension
        from tenants.db import grant_runtime_privileges

        post_migrate.connect(grant_runtime_privileges, sender=self)
        if settings.TRANSACTION_POOLING:
            from config import pooling

            # Each transaction sets the session settings for itself (config.pooling).
            connection_created.connect(pooling.install)
