"""Tenant endpoints of the API: ping (key check, used by every Mem0 client on construction).

Also what every API module documents alike (tenants is the lowest of them: authentication and
throttling, the sources of 401 and 429, live here): the error body, and `Closed`, the base of
response serializers whose keys are fixed.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import Direction, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from tenants.authentication import request_key


# A response object with a fixed set of keys, documented with additionalProperties: false (a
# comment, not a docstring: the schema would take it as every subclass's description). Response
# serializers document bodies that the views build as plain dicts; they serialize nothing.
# tests/memory/test_api_schema.py checks the real bodies against them.
class Closed(serializers.Serializer[dict[str, Any]]):
    pass


class ClosedObjects(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """No keys besides the documented ones, so a contract test catches an undocumented key."""

    target_class = Closed
    match_subclasses = True

    def map_serializer(self, auto_schema: AutoSchema, direction: Direction) -> dict[str, Any]:
        schema: dict[str, Any] = auto_schema._map_serializer(  # type: ignore[no-untyped-call]
            self.target, direction, bypass_extensions=True
        )
        schema["additionalProperties"] = False
        return schema


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {},
        "description": "Every problem, by field name, each a list of messages (nested like the "
        'input); a refusal of the request as a whole is under "non_field_errors".',
    }
)
class ErrorsField(serializers.JSONField):
    pass


class ErrorSerializer(Closed):
    """The one error body of the API (config.exceptions)."""

    detail = serializers.CharField(help_text="What went wrong; the first problem, by field.")
    # A field named like a Serializer property: DRF's metaclass moves it to _declared_fields.
    errors = ErrorsField(required=False)  # type: ignore[assignment]


class PingSerializer(Closed):
    status = serializers.CharField(help_text='Always "ok".')
    org_id = serializers.UUIDField()
    project_id = serializers.UUIDField()
    user_email = serializers.EmailField(allow_null=True, help_text="The key creator's, if known.")


@extend_schema(
    responses={200: PingSerializer, 401: ErrorSerializer, 429: ErrorSerializer},
    summary="Check an API key",
)
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
