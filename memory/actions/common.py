"""What every action shares: who acts (Actor), the refusals, the immutability rule, the
locks writers hold, and embedding before a transaction opens.

Public: memory.actions re-exports all of it. May import memory.models, memory.text,
config.exceptions, tenants (types only) and Django; nothing of memory.actions.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import connection

from config.exceptions import RefusedError
from memory.models import SCOPE_FIELDS, Memory
from memory.text.embeddings import embed

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

    from tenants.models import ApiKey

UNSET: Any = object()  # "not given", as opposed to an explicit null
Vector = Sequence[float]


@dataclass(frozen=True)
class Actor:
    """Who changes memory; recorded as "kind:id" in every history row."""

    kind: str  # api | user | enduser | extractor | command
    id: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"

    @classmethod
    def api_key(cls, key: ApiKey) -> Actor:
        return cls("api", key.prefix)

    @classmethod
    def staff(cls, user: AbstractBaseUser) -> Actor:
        return cls("user", user.get_username())

    @classmethod
    def end_user(cls, user_id: str) -> Actor:
        return cls("enduser", user_id)

    @classmethod
    def extraction(cls, event_id: uuid.UUID) -> Actor:
        return cls("extractor", str(event_id))

    @classmethod
    def command(cls, name: str) -> Actor:
        return cls("command", name)


class ImmutableMemoryError(RefusedError):
    """The change would alter an immutable memory; nothing was written."""


class NotRestorableError(RefusedError):
    """Only a deleted memory can be restored."""


def check_mutable(memory: Memory, actor: Actor, change: str) -> None:
    """The immutability rule, for every caller: no update ever; no delete by the model. A
    redacted memory is a skeleton: nothing of it changes any more."""
    if memory.state == Memory.State.REDACTED:
        raise ImmutableMemoryError(f"Memory {memory.id} is redacted and cannot be {change}d.")
    if memory.immutable and (change == "update" or actor.kind == "extractor"):
        raise ImmutableMemoryError(f"Memory {memory.id} is immutable and cannot be {change}d.")


def embed_texts(
    texts: Iterable[str],
    given: Mapping[str, Vector] | None = None,
    *,
    max_tokens: int | None = None,
) -> dict[str, Vector]:
    """Vectors for `texts`: the ones given, the rest embedded now (once per distinct text).

    Entry points call it before opening their transaction and pass the result to the action,
    with their request's embedding budget (ENGRAM_MAX_EMBED_TOKENS): over it, nothing is
    embedded and EmbeddingBudgetError (a RefusedError, 400 in the API) says so.
    """
    known = dict(given or {})
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    if missing:
        known.update(zip(missing, embed(missing, max_tokens), strict=True))
    return known


def hold_user(project_id: uuid.UUID, user_id: str | None, *, exclusive: bool = False) -> None:
    """Take the user's lock until the caller's transaction ends: shared by writers of the user's
    memories (adds, extraction applying its decisions), exclusive for their erasure. So an
    erasure waits for a write in progress and then erases what it wrote, and a write that
    waited for an erasure finds its event gone (extraction) or writes after it (a new add)."""
    if not user_id:
        return
    lock = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {lock}(hashtextextended(%s, 0))",  # lock: one of the two names above
            [json.dumps(["engram.user", str(project_id), user_id])],
        )


def hold_scope(project_id: uuid.UUID, scope: Mapping[str, str | None]) -> None:
    """Take the lock of one exact scope until the caller's transaction ends: the writers that
    store a text only if the scope has no active memory of it (raw adds, extraction applying
    its decisions) hold it from their check to their commit, so each checks after the other
    committed. Under READ COMMITTED each statement sees what was committed before it started,
    so a check made after the lock is granted sees the other writer's memory; a check alone,
    without the lock, runs while the other writer has not committed yet, and both store it.
    Take it after hold_user (every holder takes them in that order)."""
    key = [str(project_id), *(scope.get(f) for f in SCOPE_FIELDS)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            [json.dumps(["engram.scope", *key])],
        )
