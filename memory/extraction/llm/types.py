"""What extraction passes to and gets back from a model: the result types and the interface.

The conversation as the model sees it (Turn, Context), what it answers (Fact, Decision,
EntityRef, Triple, ...), what the calls cost (Usage), the error for a reply that cannot be used
(ModelOutputError), and `Extractor`, the interface every extractor implements.

May import memory.parts only: every other module of extraction depends on this one.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal, Protocol

from memory.parts import Part

Event = Literal["ADD", "UPDATE", "DELETE", "NONE"]


class ModelOutputError(RuntimeError):
    """The model's reply cannot be used (truncated, refused, no tool call, or a tool input that
    does not fit the schema even after one retry); nothing may be applied from it. `usage` is
    what the calls cost all the same."""

    def __init__(self, message: str, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.usage = usage or Usage()


@dataclass(frozen=True)
class Turn:
    position: int
    role: str
    content: str  # for a multimodal part, its placeholder ("[image: URL]")
    part: Part | None = None  # an image or PDF of a new message (text documents are read first)
    name: str = ""  # the speaker's name, when the message gives one


@dataclass(frozen=True)
class Context:
    new_messages: Sequence[Turn]
    observed_on: date
    recent_messages: Sequence[Turn] = ()
    summary: str = ""
    custom_instructions: str = ""
    categories: Sequence[str] = ()
    includes: str = ""
    excludes: str = ""
    about_agent: bool = False  # extract the agent's facts (agent scope) instead of the user's
    timezone: str = ""  # the request's IANA time zone, in which observed_on is the local date


@dataclass(frozen=True)
class Fact:
    text: str
    category: str | None = None
    confidence: float = 1.0
    positions: tuple[int, ...] = ()


@dataclass(frozen=True)
class Existing:
    id: uuid.UUID
    text: str
    similarity: float = 0.0  # to the candidate it was retrieved for
    when: date | None = None  # when what it says was observed (the memory's created_at)


@dataclass(frozen=True)
class Decision:
    event: Event
    fact: int  # index into the candidates
    memory_id: uuid.UUID | None = None  # the existing memory an UPDATE / DELETE / NONE is about
    text: str = ""  # the text to store for ADD / UPDATE


@dataclass
class Usage:
    """What model calls cost (the Messages API's usage, summed), and the notes on model output
    that was not used (an item that did not fit its schema), which end in the event's error."""

    calls: int = 0
    input_tokens: int = 0  # not counting the cached prompt prefix (read or written)
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    notes: list[str] = field(default_factory=list)
    # The model that made the calls, as configured (ENGRAM_LLM_MODEL): what the Usage page
    # prices them by. "" for the offline extractor (no calls) and for usage recorded before.
    model: str = ""

    COUNTS = (
        "calls",
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    )

    def add(self, other: Usage) -> None:
        for name in self.COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.notes += other.notes
        self.model = self.model or other.model

    def counts(self) -> dict[str, int]:
        """The figures an event records (its `usage`)."""
        return {name: getattr(self, name) for name in self.COUNTS}

    def recorded(self) -> dict[str, Any]:
        """What an event records as its `usage`: the figures, and the model when known."""
        return self.counts() | ({"model": self.model} if self.model else {})

    @classmethod
    def from_counts(cls, counts: dict[str, Any]) -> Usage:
        """The figures an event recorded (its `usage`), to add to."""
        usage = cls()
        for name in cls.COUNTS:
            setattr(usage, name, int(counts.get(name) or 0))
        usage.model = str(counts.get("model") or "")
        return usage


@dataclass
class Decisions:
    decisions: list[Decision] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # why some model output was not used


@dataclass(frozen=True)
class EntityRef:
    name: str
    type: str = ""


@dataclass(frozen=True)
class Triple:
    source: str
    relationship: str
    destination: str
    fact: int  # index into the facts the relations were extracted from


@dataclass(frozen=True)
class KnownEdge:
    """A valid edge of the scope's graph, as the contradiction step sees it."""

    id: int
    source: str
    relationship: str
    destination: str


@dataclass
class Relations:
    triples: list[Triple] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)


@dataclass
class Contradictions:
    edge_ids: list[int] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)


class Extractor(Protocol):
    name: str
    # The kinds of attachment (memory.parts IMAGE, PDF) extract and procedure are shown; the
    # others are skipped, with a note on the event.
    attachments: frozenset[str]

    def extract(self, context: Context) -> tuple[list[Fact], Usage]: ...

    def decide(
        self,
        facts: Sequence[Fact],
        existing: Sequence[Sequence[Existing]],
        observed_on: date | None = None,
    ) -> tuple[Decisions, Usage]: ...

    def procedure(self, context: Context) -> tuple[str, Usage]:
        """One step-by-step summary of what the agent did (procedural memory)."""
        ...

    def summarize(self, previous: str, turns: Sequence[Turn]) -> tuple[str | None, Usage]:
        """The scope's running summary with `turns` folded in; None keeps none."""
        ...

    def entities(
        self, facts: Sequence[Fact], self_name: str | None
    ) -> tuple[list[EntityRef], Usage]:
        """The entities the facts are about; self-references resolved to `self_name`."""
        ...

    def relations(
        self, facts: Sequence[Fact], entities: Sequence[EntityRef], self_name: str | None
    ) -> tuple[Relations, Usage]:
        """Triples among `entities` only, each citing the index of its fact."""
        ...

    def contradictions(
        self, triples: Sequence[Triple], edges: Sequence[KnownEdge]
    ) -> tuple[Contradictions, Usage]:
        """Which existing `edges` the new `triples` make false."""
        ...
