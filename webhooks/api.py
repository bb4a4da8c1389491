"""The Mem0 Platform's webhook endpoints, for the key's own project.

    GET, POST     /api/v1/webhooks/projects/{project_id}/   list; create (the secret, once)
    PUT, DELETE   /api/v1/webhooks/{webhook_id}/             change; delete

Another project's id, or another project's webhook, answers 404 as if it did not exist. Every
key lists; creating, changing and deleting need a key whose creator is an owner or admin
(tenants.projects_api.require_role, as for the project's settings), and the webhook records
the key that created it: revoking that key disables the webhook (migration 0002).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import log_request, note_access
from tenants.api import Closed, ErrorSerializer
from tenants.authentication import request_key
from tenants.db import project_context
from tenants.models import Project
from tenants.projects_api import EDITORS, require_role
from webhooks import actions, queries
from webhooks.addresses import UrlError
from webhooks.models import EVENT_TYPES, NAME_MAX_LENGTH, URL_MAX_LENGTH, Webhook

# Keys the 1.x clients add to every body (org and project, which the key already names).
TOLERATED_KEYS = frozenset({"org_id", "project_id"})


class _Strict(serializers.Serializer[dict[str, Any]]):
    """A body with the declared keys only (and the tolerated ones): any other is a 400."""

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        given = self.initial_data if isinstance(self.initial_data, dict) else {}
        unknown = sorted(set(given) - set(self.fields) - TOLERATED_KEYS)
        if unknown:
            raise serializers.ValidationError(
                {unknown[0]: f"unknown field; known: {', '.join(self.fields)}."}
            )
        return attrs


def _event_types(**kwargs: Any) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(choices=EVENT_TYPES),
        min_length=1,
        max_length=20,
        help_text=f"Any of: {', '.join(EVENT_TYPES)}.",
        **kwargs,
    )


class WebhookCreateSerializer(_Strict):
    name = serializers.CharField(max_length=NAME_MAX_LENGTH)
    url = serializers.CharField(
        max_length=URL_MAX_LENGTH,
        help_text="http(s); its host must resolve to public addresses only, unless the operator "
        "lists it in ENGRAM_FETCH_ALLOWED_HOSTS.",
    )
    event_types = _event_types()


class WebhookUpdateSerializer(_Strict):
    name = serializers.CharField(max_length=NAME_MAX_LENGTH, required=False)
    url = serializers.CharField(max_length=URL_MAX_LENGTH, required=False)
    event_types = _event_types(required=False)
    is_active = serializers.BooleanField(
        required=False, help_text="engram's: false disables the webhook, true enables it again."
    )


class WebhookSerializer(Closed):
    webhook_id = serializers.IntegerField()
    name = serializers.CharField()
    url = serializers.CharField()
    event_types = serializers.ListField(child=serializers.ChoiceField(choices=EVENT_TYPES))
    project = serializers.CharField(help_text="The project's name.")
    project_id = serializers.UUIDField()
    is_active = serializers.BooleanField()
    disabled_reason = serializers.CharField(
        allow_null=True, help_text="Why it was disabled (failures in a row, or by whom)."
    )
    consecutive_failures = serializers.IntegerField(help_text="Failed attempts in a row.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class CreatedWebhookSerializer(WebhookSerializer):
    secret = serializers.CharField(
        help_text="The HMAC-SHA256 key of the Engram-Signature header. Shown this once."
    )


class MessageSerializer(Closed):
    message = serializers.CharField()


def _errors(extra: dict[int, str]) -> dict[int, OpenApiResponse]:
    reasons = {401: "No valid API key.", 429: "Too many requests: see Retry-After."} | extra
    return {
        code: OpenApiResponse(ErrorSerializer, description=why) for code, why in reasons.items()
    }


BODY_ERRORS = {
    400: "Invalid body: an unknown key, event type or a URL engram will not call.",
    413: "The body is too large.",
    415: "The body is not JSON.",
}
FORBIDDEN = {403: "The key's creator is not an owner or admin of the organization."}
WRITE = "create, change or delete webhooks"


def webhook_data(webhook: Webhook, project: Project) -> dict[str, Any]:
    return {
        "webhook_id": webhook.id,
        "name": webhook.name,
        "url": webhook.url,
        "event_types": list(webhook.event_types),
        "project": project.name,
        "project_id": str(project.pk),
        "is_active": webhook.enabled,
        "disabled_reason": webhook.disabled_reason or None,
        "consecutive_failures": webhook.consecutive_failures,
        "created_at": webhook.created_at.isoformat(),
        "updated_at": webhook.updated_at.isoformat(),
    }


@contextmanager
def tenant(request: Request, code: int = 200) -> Iterator[Project]:
    """The request's one transaction in its key's project, logged at its end."""
    project_id = request_key(request).project_id
    with project_context(project_id, before_commit=lambda: log_request(request, code)):
        yield Project.objects.get(pk=project_id)


def _own_project(request: Request, project_id: str) -> None:
    """404 unless the path names the key's own project."""
    try:
        named = uuid.UUID(project_id)
    except ValueError:
        raise NotFound() from None
    if named != request_key(request).project_id:
        raise NotFound()


def _refusal(exc: ValueError) -> serializers.ValidationError:
    field = "url" if isinstance(exc, UrlError) else "non_field_errors"
    message = str(exc)
    if message.startswith("url: "):
        message = message.removeprefix("url: ")
    return serializers.ValidationError({field: message})


@extend_schema(
    methods=["GET"],
    responses={200: WebhookSerializer(many=True), **_errors({404: "Not this key's project."})},
    summary="List the project's webhooks",
)
@extend_schema(
    methods=["POST"],
    request=WebhookCreateSerializer,
    responses={
        201: CreatedWebhookSerializer,
        **_errors({**BODY_ERRORS, **FORBIDDEN, 404: "Not this key's project."}),
    },
    summary="Create a webhook (its signing secret is in the answer, once)",
)
@api_view(["GET", "POST"])
def project_webhooks(request: Request, project_id: str) -> Response:
    _own_project(request, project_id)
    if request.method == "GET":
        with tenant(request) as project:
            found = [webhook_data(w, project) for w in queries.webhooks(project.pk)]
            note_access(request, result_count=len(found))
        return Response(found)
    serializer = WebhookCreateSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    key = request_key(request)
    # Before the URL is checked: a reader's key learns nothing of what a host resolves to.
    require_role(key, EDITORS, WRITE)
    with tenant(request, status.HTTP_201_CREATED) as project:
        try:
            webhook = actions.do_create_webhook(
                project.pk,
                name=data["name"],
                url=data["url"],
                event_types=data["event_types"],
                created_by_key=key,
            )
        except ValueError as exc:
            raise _refusal(exc) from None
        body = {**webhook_data(webhook, project), "secret": webhook.secret}
    return Response(body, status=status.HTTP_201_CREATED)


@extend_schema(
    methods=["PUT"],
    request=WebhookUpdateSerializer,
    responses={
        200: MessageSerializer,
        **_errors({**BODY_ERRORS, **FORBIDDEN, 404: "No such webhook."}),
    },
    summary="Change a webhook",
)
@extend_schema(
    methods=["DELETE"],
    responses={200: MessageSerializer, **_errors({**FORBIDDEN, 404: "No such webhook."})},
    summary="Delete a webhook and its deliveries",
)
@api_view(["PUT", "DELETE"])
def webhook_detail(request: Request, webhook_id: int) -> Response:
    if request.method == "DELETE":
        require_role(request_key(request), EDITORS, WRITE)
        with tenant(request) as project:
            actions.do_delete_webhook(_webhook(project, webhook_id))
        return Response({"message": "Webhook deleted successfully"})
    serializer = WebhookUpdateSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    require_role(request_key(request), EDITORS, WRITE)
    with tenant(request) as project:
        webhook = _webhook(project, webhook_id)
        try:
            actions.do_update_webhook(webhook, **serializer.validated_data)
        except ValueError as exc:
            raise _refusal(exc) from None
    return Response({"message": "Webhook updated successfully"})


def _webhook(project: Project, webhook_id: int) -> Webhook:
    found = queries.webhook(project.pk, webhook_id)
    if found is None:
        raise NotFound()
    return found
