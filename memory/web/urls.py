"""The dashboards' URLs (namespace "web"): /dashboard/ for operators, /me/ for end users, and
/favicon.ico. Their error pages are memory.web.errors' (PAGE_ROOTS names these roots)."""

from __future__ import annotations

from django.urls import include, path

from memory.web import (
    enduser,
    erasures,
    errors,
    memories,
    operations,
    settings,
    usage,
    views,
    webhooks,
)

app_name = "web"

urlpatterns = [
    path("dashboard/login/", views.LoginView.as_view(), name="login"),
    path("dashboard/logout/", views.LogoutView.as_view(), name="logout"),
    path("dashboard/", views.home, name="home"),
    path("dashboard/switch/", views.switch, name="switch"),
    # memories.py owns "dashboard/p/<project_id>/" (name "project": the project's scopes).
    path("dashboard/p/<uuid:project_id>/", include(memories.urlpatterns)),
    path("dashboard/p/<uuid:project_id>/", include(operations.urlpatterns)),
    path("dashboard/p/<uuid:project_id>/", include(usage.urlpatterns)),
    path("dashboard/p/<uuid:project_id>/", include(webhooks.urlpatterns)),
    path("dashboard/p/<uuid:project_id>/", include(settings.urlpatterns)),
    path("dashboard/p/<uuid:project_id>/", include(erasures.urlpatterns)),
    path("me/", include(enduser.urlpatterns)),
    path("favicon.ico", errors.favicon, name="favicon"),
]
