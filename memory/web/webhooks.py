"""The project's webhooks, for its operators: their state, the recent deliveries, and the two
repairs an operator makes here: enable a disabled webhook again, rotate its secret.

Writes go through webhooks.actions, reads through webhooks.queries. Readers see everything but
the secrets and change nothing (operator_page answers 403 to their POSTs). Webhooks are made,
changed and deleted through the API (docs/webhooks.md).
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from memory.web.common import Dashboard, operator_page
from webhooks import actions, queries
from webhooks.models import Webhook

# A rotated secret waiting to be shown once, on the next GET of the page (post/redirect/get).
NEW_SECRET = "web.webhook_secret"  # noqa: S105 - a session key, not a secret


@operator_page()
def webhooks(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    project = dash.project.pk
    shown = request.session.pop(NEW_SECRET, None)
    if shown and shown.get("project") != str(project):
        shown = None
    context = {
        "section": "webhooks",
        "webhooks": list(queries.webhooks(project)),
        "deliveries": queries.recent_deliveries(project),
        "new_secret": shown,
    }
    response = render(request, "web/operator/webhooks.html", context)
    if shown:
        response["Cache-Control"] = "no-store"
    return response


def _webhook(dash: Dashboard, webhook_id: int) -> Webhook:
    found = queries.webhook(dash.project.pk, webhook_id)
    if found is None:
        raise Http404("No such webhook.")
    return found


@operator_page(write=True)
@require_POST
def webhook_enable(request: HttpRequest, dash: Dashboard, webhook_id: int) -> HttpResponse:
    webhook = _webhook(dash, webhook_id)
    sent = actions.do_enable_webhook(webhook)
    messages.success(
        request,
        format_html(
            "The webhook <bdi>{}</bdi> is enabled; {} pending deliveries are sent again.",
            webhook.name,
            sent,
        ),
    )
    return redirect("web:webhooks", project_id=dash.project.pk)


@operator_page(write=True)
def webhook_rotate(request: HttpRequest, dash: Dashboard, webhook_id: int) -> HttpResponse:
    """GET: a confirmation (the receiver must be given the new secret); POST: rotate."""
    webhook = _webhook(dash, webhook_id)
    if request.method != "POST":
        context = {"section": "webhooks", "webhook": webhook}
        return render(request, "web/operator/webhook_rotate.html", context)
    secret = actions.do_rotate_secret(webhook)
    request.session[NEW_SECRET] = {
        "project": str(dash.project.pk),
        "name": webhook.name,
        "secret": secret,
    }
    response = redirect("web:webhooks", project_id=dash.project.pk)
    response.status_code = 303
    return response


urlpatterns = [
    path("webhooks/", webhooks, name="webhooks"),
    path("webhooks/<int:webhook_id>/enable/", webhook_enable, name="webhook_enable"),
    path("webhooks/<int:webhook_id>/rotate/", webhook_rotate, name="webhook_rotate"),
]
