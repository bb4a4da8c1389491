"""A memory's versions, as its page in the dashboards shows them: newest first, each with a
word-level difference from the one before and what caused it.

A version is a history row that gave the memory a text (ADD, UPDATE, RESTORE, REVERT), over the
memory and the memories it superseded (its lineage: the model's UPDATE makes a new memory and
keeps the old one). What caused it is read from the row's actor: the add request (the model or
the offline extractor, from the event's `extractor`), a person (`user:`), an API key (`api:`),
the end user (`enduser:`) or a command.

May import memory.queries and memory.models.
"""

from __future__ import annotations

import difflib
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from memory import queries
from memory.models import Memory, MemoryEvent, MemoryHistory

_WORDS = re.compile(r"\s+|[^\s]+")
GIVES_TEXT = (
    MemoryHistory.Event.ADD,
    MemoryHistory.Event.UPDATE,
    MemoryHistory.Event.RESTORE,
    MemoryHistory.Event.REVERT,
)


@dataclass(frozen=True)
class Piece:
    """A run of the text: "same", "added" or "removed" since the version before."""

    kind: str
    text: str


@dataclass(frozen=True)
class Version:
    history_id: uuid.UUID
    memory_id: uuid.UUID
    at: datetime
    change: str  # the history row's event
    text: str
    pieces: list[Piece]
    cause: str  # who or what made it, in words
    event_id: uuid.UUID | None  # the add request behind it, if its event is stored
    current: bool  # the text the memory has now


def word_diff(before: str, after: str) -> list[Piece]:
    """`after` against `before`, word by word (whitespace kept), as runs of pieces."""
    old, new = _WORDS.findall(before), _WORDS.findall(after)
    pieces: list[Piece] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            pieces.append(Piece("same", "".join(new[j1:j2])))
            continue
        if i2 > i1:
            pieces.append(Piece("removed", "".join(old[i1:i2])))
        if j2 > j1:
            pieces.append(Piece("added", "".join(new[j1:j2])))
    return pieces


Cause = Callable[[MemoryHistory, dict[uuid.UUID, MemoryEvent]], str]


def cause(row: MemoryHistory, events: dict[uuid.UUID, MemoryEvent]) -> str:
    """What made the change, in the operator's words."""
    kind, _, who = row.actor.partition(":")
    if kind == "extractor":
        event = events.get(row.event_id) if row.event_id else None
        extractor = event.extractor if event is not None else ""
        by = "the offline extractor" if extractor == "offline" else "the model"
        return f"an add request, decided by {by}"
    return {
        "user": f"{who}, in the dashboard",
        "api": f"the API key {who}",
        "enduser": "the user, on their own page",
        "command": f"the command {who}",
    }.get(kind, row.actor)


# Who made a change, as the end user is told (memory.actions.Actor kinds; no key prefixes or
# staff names).
END_USER_ACTORS = {
    "api": "the application",
    "user": "support staff",
    "enduser": "you",
    "extractor": "automatic extraction",
    "command": "an administrator",
}


def end_user_cause(row: MemoryHistory, events: dict[uuid.UUID, MemoryEvent]) -> str:
    """What made the change, in the end user's words."""
    return END_USER_ACTORS.get(row.actor.partition(":")[0], "someone")


def versions(project_id: uuid.UUID, memory: Memory, *, described: Cause = cause) -> list[Version]:
    """Every version of `memory` and of the memories it superseded, newest first; what caused
    each, as `described` words it."""
    lineage = [*reversed(queries.linked_memory_ids(project_id, [memory.pk])[memory.pk]), memory.pk]
    histories = queries.histories(project_id, lineage)
    rows = [
        row
        for memory_id in lineage
        for row in histories[memory_id]
        if row.event in GIVES_TEXT and row.new_memory is not None
    ]
    rows.sort(key=lambda row: (row.created_at, str(row.id)))
    # A superseded memory's last row is its supersession: the replacement's text, not its own.
    last = rows[-1] if rows else None
    if (
        memory.replaced_by_id
        and last is not None
        and last.memory_id == memory.pk
        and last.event == MemoryHistory.Event.UPDATE
        and last.new_memory != memory.text
    ):
        rows = rows[:-1]
    events = queries.events_by_id(project_id, {r.event_id for r in rows if r.event_id})
    return list(reversed(_versions(rows, events, memory, described)))


def _versions(
    rows: Sequence[MemoryHistory],
    events: dict[uuid.UUID, MemoryEvent],
    memory: Memory,
    described: Cause,
) -> list[Version]:
    found: list[Version] = []
    before = ""
    last_request: uuid.UUID | None = None
    for row in rows:
        text = row.new_memory or ""
        if found and (found[-1].text, last_request) == (text, row.event_id) and row.event_id:
            continue  # a supersession: the old memory's UPDATE row, then its replacement's ADD
        last_request = row.event_id
        found.append(
            Version(
                history_id=row.id,
                memory_id=row.memory_id,
                at=row.created_at,
                change=row.event,
                text=text,
                pieces=word_diff(before, text) if before else [Piece("same", text)],
                cause=described(row, events),
                # An add stored as sent (infer=false) names a request that has no event.
                event_id=row.event_id if row.event_id in events else None,
                current=False,
            )
        )
        before = text
    # "Current": the text an active memory has now (a deleted, redacted or superseded one has
    # none in use).
    if found and found[-1].text == memory.text and memory.state == Memory.State.ACTIVE:
        last = found[-1]
        found[-1] = Version(**{**last.__dict__, "current": True})
    return found
