"""Tenant endpoints of the API: ping (key check, used by every Mem0 client on construction)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from tenants.authentication import request_key

PingSerializer = inline_serializer(
    "Ping",
    {
        "status": serializers.CharField(),
        "org_id": serializers.CharField(),
        "project_id": serializers.CharField(),
        "user_email": serializers.EmailField(allow_null=True),
    },
)


@extend_schema(responses={200: PingSerializer}, summary="Check an API key")
@api_view(["GET"])
def ping(request: Request) -> Response:
    key = request_key(request)
    creator = key.created_by
    return Response(
        {
            "status": "ok",
            "org_id": str(key.project.organization_id),
            "project_id": str(key.project_id),
            "user_email": (creator.email or None) if creator else None,
        }
    )
