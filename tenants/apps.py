from __future__ import annotations

from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from tenants import schema  # noqa: F401 - registers the OpenAPI auth extension
        from tenants.db import grant_runtime_privileges

        post_migrate.connect(grant_runtime_privileges, sender=self)
