"""The webhook endpoints (included at the root by config/urls.py)."""

from __future__ import annotations

from django.urls import path

from webhooks import api

urlpatterns = [
    path(
        "api/v1/webhooks/projects/<str:project_id>/",
        api.project_webhooks,
        name="webhooks-project",
    ),
    path("api/v1/webhooks/<int:webhook_id>/", api.webhook_detail, name="webhook"),
]
