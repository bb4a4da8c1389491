"""Signed, expiring links to an end user's own dashboard (memory/web/enduser.py).

A link carries its project, the user id, the API key that minted it and its expiry, signed with
SECRET_KEY under a salt of its own (django.core.signing), so nothing is stored per link. It
stops working when it expires, when the key that minted it is revoked (revoking a key revokes
every link it made), or when SECRET_KEY changes (every link at once, and every session too).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core import signing

from tenants.models import ApiKey

SALT = "engram.enduser-dashboard.v1"
DEFAULT_SECONDS = 3600
MIN_SECONDS = 60
MAX_SECONDS = 7 * 24 * 3600


class LinkError(Exception):
    """The link cannot be used; `reason` is what the refusal page says."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class DashboardLink:
    project_id: uuid.UUID
    user_id: str
    key_id: uuid.UUID
    expires_at: datetime
    # The staff member who opened the page from the operator dashboard ("" for the user's own
    # link): what they change there is recorded under their name, not the user's.
    by: str = ""


def mint(key: ApiKey, user_id: str, expires_in: int, *, by: str = "") -> tuple[str, datetime]:
    """A token for `user_id` in the key's project, valid for `expires_in` seconds; `by`, the
    staff member's username when an operator opens the user's page (see DashboardLink.by)."""
    if not MIN_SECONDS <= expires_in <= MAX_SECONDS:
        raise ValueError(f"expires_in must be from {MIN_SECONDS} to {MAX_SECONDS} seconds.")
    # time.time(), not timezone.now(): the signer dates its signature with it too, so one clock
    # decides (and one patch of it moves both in tests).
    expires = int(time.time()) + expires_in
    payload: dict[str, Any] = {"p": key.project_id.hex, "u": user_id, "k": key.id.hex, "e": expires}
    if by:
        payload["b"] = by
    token = signing.dumps(payload, salt=SALT, compress=True)
    return token, datetime.fromtimestamp(expires, tz=UTC)


def resolve(token: str) -> DashboardLink:
    """The link `token` stands for, if it is genuine, unexpired and its key not revoked.

    Raises LinkError. One query (the minting key, by primary key) for a genuine token.
    """
    try:
        # The signer's own age check backs the expiry inside the payload.
        data: Any = signing.loads(token, salt=SALT, max_age=MAX_SECONDS + 60)
    except signing.SignatureExpired:
        raise LinkError("This link has expired.") from None
    except (signing.BadSignature, ValueError):
        raise LinkError("This link is not valid.") from None
    link = _parse(data)
    if link.expires_at.timestamp() <= time.time():
        raise LinkError("This link has expired.")
    if not ApiKey.objects.active().filter(pk=link.key_id, project_id=link.project_id).exists():
        raise LinkError("This link has been revoked.")
    return link


def _parse(data: Any) -> DashboardLink:
    try:
        expires, by = data["e"], data.get("b", "")
        if not isinstance(expires, int) or not isinstance(data["u"], str):
            raise TypeError
        if not isinstance(by, str):
            raise TypeError
        return DashboardLink(
            project_id=uuid.UUID(hex=data["p"]),
            user_id=data["u"],
            key_id=uuid.UUID(hex=data["k"]),
            expires_at=datetime.fromtimestamp(expires, tz=UTC),
            by=by,
        )
    except (KeyError, TypeError, ValueError, OverflowError):
        # Signed by us, so never expected: a payload of another version of this module.
        raise LinkError("This link is not valid.") from None
