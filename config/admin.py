"""engram's admin site: Django's, with failed logins limited per client address
(config.logins, the limit it shares with the operator dashboard's login)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.decorators import method_decorator

from config.logins import limit_failed_logins


class EngramAdminSite(admin.AdminSite):
    @method_decorator(limit_failed_logins)
    def login(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        return super().login(request, extra_context)
