from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from tenants import api as tenants_api

# An HTML page for the dashboards and the admin, the API's JSON for every other path.
handler400 = "memory.web.errors.bad_request"
handler403 = "memory.web.errors.permission_denied"
handler404 = "memory.web.errors.not_found"
handler500 = "memory.web.errors.server_error"

urlpatterns = [
    path("v1/ping/", tenants_api.ping, name="ping"),
    path("", include("memory.api.urls")),
    path("", include("webhooks.urls")),  # the Platform's webhooks (webhooks/api.py)
    path("", include("tenants.projects_api")),  # the Platform's projects and members
    path("", include("memory.mcp.urls")),  # the MCP endpoint for agents (memory/mcp/http.py)
    path(
        "api/schema/",
        SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[]),
        name="schema",
    ),
    # The split view serves Swagger UI's start-up script as a file of its own (?script), not
    # inline, so the Content-Security-Policy can refuse every inline script.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(
            url_name="schema", authentication_classes=[], permission_classes=[]
        ),
        name="docs",
    ),
    path("admin/", admin.site.urls),
    path("", include("memory.web.urls")),  # the dashboards (memory/web/)
]
