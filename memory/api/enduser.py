"""Links to an end user's own dashboard: an application mints one and hands it to its user.

The link is signed and expires (tenants.links); the pages it opens are memory/web/enduser.py.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from config.inputs import text_problem
from memory.api import responses as r
from memory.api import serializers as s
from memory.api.common import tenant
from tenants import links
from tenants.authentication import request_key


class ExpiresInField(serializers.IntegerField):
    """A JSON integer only: not a string, a float or a boolean (DRF's field takes all three)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class DashboardLinkRequestSerializer(serializers.Serializer[dict[str, Any]]):
    expires_in = ExpiresInField(
        required=False,
        default=links.DEFAULT_SECONDS,
        min_value=links.MIN_SECONDS,
        max_value=links.MAX_SECONDS,
        help_text="Seconds the link stays valid: 60 to 604800 (7 days); 3600 by default.",
    )


@extend_schema(
    request=DashboardLinkRequestSerializer,
    responses=r.answers({200: r.DashboardLinkSerializer}, body=True),
    parameters=[
        OpenApiParameter(
            "user_id",
            str,
            OpenApiParameter.PATH,
            description="The end user's id, percent-encoded (`team/alpha` as `team%2Falpha`).",
        ),
        r.RETRY_AFTER,
    ],
    summary="A signed, expiring link to the user's own memory dashboard",
    description=(
        "Hand the link to the user: it opens a page, with no login, where they see their own "
        "memories in this project (those with this `user_id`, whatever the agent, app or run), "
        "search them, see where each came from, correct or delete one, download them all as "
        "JSON and request erasure of everything. The link works until `expires_at`, or until "
        "the API key that minted it is revoked. Nothing is stored per link."
    ),
)
@api_view(["POST"])
def dashboard_link(request: Request, user_id: str) -> Response:
    if problem := text_problem(user_id):
        raise serializers.ValidationError({"user_id": problem})
    try:  # as an add stores it (" x " is "x"): the link shows the memories added for it
        user_id = s.scope_id(user_id)
    except s.ScopeIdError as exc:
        raise serializers.ValidationError({"user_id": str(exc)}) from None
    serializer = DashboardLinkRequestSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    key = request_key(request)
    token, expires_at = links.mint(key, user_id, serializer.validated_data["expires_in"])
    with tenant(request):
        note_access(request, scope={"user_id": user_id}, result_count=1)
    path = reverse("web:enduser_home", kwargs={"token": token})
    base = settings.ENGRAM_PUBLIC_URL
    url = base + path if base else request.build_absolute_uri(path)
    return Response({"url": url, "expires_at": expires_at.isoformat()})
