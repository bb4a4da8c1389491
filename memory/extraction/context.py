"""What the extractor is shown of an event: its Context.

The new messages (a multimodal part parsed again: the payload is input), and as text only the
scope's last messages (shortened) and its running summary, the observation date in the
request's time zone, and the request's instructions and categories (Mem0's defaults when it
sets none); notes on the images and PDFs an extractor cannot read.

May import memory.models, memory.parts, memory.queries and llm.types.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from memory.extraction.llm.types import Context, Extractor, Turn
from memory.models import MemoryEvent, ScopeSummary
from memory.parts import IMAGE, describe, parse_part
from memory.queries import scope_lookup

RECENT_TURNS = 10


# Mem0's default memory categories, used when neither the request nor the project sets some.
DEFAULT_CATEGORIES = (
    "personal_details",
    "family",
    "professional_details",
    "sports",
    "travel",
    "food",
    "music",
    "health",
    "technology",
    "hobbies",
    "fashion",
    "entertainment",
    "milestones",
    "user_preferences",
    "misc",
)


def skipped_parts(context: Context, extractor: Extractor) -> list[str]:
    """The event's notes on the images and PDFs the extractor's model is not shown."""
    return [
        f"message {turn.position}: {turn.part.type} skipped, the {extractor.name} extractor "
        f"does not read {'images' if turn.part.type == IMAGE else 'PDFs'} (see the extraction "
        "settings)"
        for turn in context.new_messages
        if turn.part is not None and turn.part.type not in extractor.attachments
    ]


def message_turn(position: int, message: dict[str, Any], *, with_part: bool = True) -> Turn:
    """A payload message as the extractor sees it: its text, or for a multimodal part its
    placeholder and, `with_part`, the part itself (checked again: the payload is input)."""
    content, name = message["content"], message.get("name") or ""
    if isinstance(content, str):
        return Turn(position, message["role"], content, name=name)
    if not with_part:
        return Turn(position, message["role"], describe(content), name=name)
    part = parse_part(content)
    return Turn(position, message["role"], part.placeholder(), part, name=name)


def build_context(event: MemoryEvent, scope: dict[str, Any]) -> Context:
    """The new messages (with their parts), and as text only: the scope's last messages, its
    running summary, the observation date and the request's instructions."""
    payload = event.payload
    new = [message_turn(i, m) for i, m in enumerate(payload["messages"])]
    earlier = MemoryEvent.objects.filter(
        status=MemoryEvent.Status.SUCCEEDED, created_at__lt=event.created_at, **scope_lookup(scope)
    ).order_by("-created_at")[:3]
    recent: list[Turn] = []
    for previous in earlier:
        recent = [
            shortened(message_turn(-1, m, with_part=False)) for m in previous.payload["messages"]
        ] + recent
    zone = payload.get("timezone") or ""
    observed_on = observed_at(event).astimezone(ZoneInfo(zone or "UTC")).date()
    summary = ScopeSummary.objects.filter(
        project_id=event.project_id, **scope_lookup(scope)
    ).first()
    return Context(
        new_messages=new,
        observed_on=observed_on,
        summary=summary.text if summary else "",
        recent_messages=recent[-RECENT_TURNS:],
        custom_instructions=payload.get("custom_instructions") or "",
        categories=payload.get("custom_categories") or DEFAULT_CATEGORIES,
        includes=payload.get("includes") or "",
        excludes=payload.get("excludes") or "",
        about_agent=bool(scope.get("agent_id")) and not scope.get("user_id"),
        timezone=zone,
    )


# Earlier messages are context only: each is cut to this many characters.
RECENT_CHARACTERS = 600


def shortened(turn: Turn) -> Turn:
    if len(turn.content) <= RECENT_CHARACTERS:
        return turn
    return replace(turn, content=turn.content[:RECENT_CHARACTERS] + " […]")


def observed_at(event: MemoryEvent) -> datetime:
    """When the event's messages were said: the request's observation date or time, else its
    `timestamp`, else when it came."""
    observed, timestamp = event.payload.get("observed_at"), event.payload.get("timestamp")
    if observed:
        return datetime.fromisoformat(observed)
    return datetime.fromtimestamp(timestamp, tz=UTC) if timestamp else event.created_at
