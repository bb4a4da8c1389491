"""The Django admin, on engram's own admin site (a login form with an attempt limit)."""

from __future__ import annotations

from django.contrib.admin.apps import AdminConfig


class EngramAdminConfig(AdminConfig):
    default_site = "config.admin.EngramAdminSite"
