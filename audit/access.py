"""What a request tells the access log: its key, the scope ids it touched and a result count.

Authentication fills in the key (and the presented key's prefix, even when it fails); API views
add scope and count with `note_access`. The access log
middleware reads the record after the response.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest
from rest_framework.request import Request

if TYPE_CHECKING:
    from tenants.models import ApiKey

SCOPE_KEYS = ("user_id", "agent_id", "app_id", "run_id")
_ATTRIBUTE = "_engram_access"


@dataclass
class AccessRecord:
    api_key: ApiKey | None = None
    key_prefix: str = ""
    scope: dict[str, Any] = field(default_factory=dict)
    result_count: int | None = None


def access_record(request: Request | HttpRequest) -> AccessRecord:
    django_request = request._request if isinstance(request, Request) else request
    record: AccessRecord | None = django_request.__dict__.get(_ATTRIBUTE)
    if record is None:
        record = django_request.__dict__[_ATTRIBUTE] = AccessRecord()
    return record


def note_access(
    request: Request | HttpRequest,
    *,
    scope: Mapping[str, Any] | None = None,
    result_count: int | None = None,
) -> None:
    record = access_record(request)
    if scope is not None:
        record.scope = {key: value for key, value in scope.items() if key in SCOPE_KEYS and value}
    if result_count is not None:
        record.result_count = result_count
