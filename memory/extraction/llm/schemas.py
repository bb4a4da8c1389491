"""The tools the model is forced to call, and reading its tool input back.

Each tool's input schema is a pydantic model (the model's JSON schema is sent as the tool's
`input_schema`; the class names, underscores included, appear in it as titles). A reply is
read item by item (`parse_items`: an item that does not fit is dropped with a note) or as a
whole (`parse_whole`); the decide step's small ids are mapped back to memories
(`map_decisions`). Each call's max_tokens is sized here, by what its tool input can hold.

May import llm.types (and pydantic, the anthropic SDK's types) only: the prompts are in
llm.prompts, the client in llm.claude.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, TypeVar

from anthropic.types import ToolParam
from pydantic import BaseModel, Field, ValidationError, field_validator

from memory.extraction.llm.types import Decision, Decisions, Event, Fact, ModelOutputError


def _tool(name: str, description: str, schema: type[BaseModel]) -> ToolParam:
    """A tool the model is forced to call, its input schema taken from the pydantic model."""
    return {"name": name, "description": description, "input_schema": schema.model_json_schema()}


class _FactOut(BaseModel):
    text: str = Field(min_length=1, max_length=2000)
    category: str | None = None
    confidence: float = Field(default=1.0, ge=0, le=1)
    positions: list[int] = []


class _Facts(BaseModel):
    facts: list[_FactOut]


class _DecisionOut(BaseModel):
    fact: int = Field(ge=0)
    event: Event
    id: str | None = None
    text: str | None = None

    @field_validator("event", mode="before")
    @classmethod
    def _event_name(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value  # "update" is UPDATE

    @field_validator("id", mode="before")
    @classmethod
    def _small_id(cls, value: Any) -> Any:
        # The ids are shown as small integers; a model may answer 3 for "3".
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class _Decisions(BaseModel):
    decisions: list[_DecisionOut]


Item = TypeVar("Item", bound=BaseModel)

# Each call's max_tokens, by what its tool input can hold (ENGRAM_LLM_MAX_TOKENS caps them all;
# fact extraction and procedures take the cap itself).
DECIDE_TOKENS_BASE = 200
DECIDE_TOKENS_PER_FACT = 160  # one decision: the event, two ids and a rewritten fact
SUMMARY_TOKENS = 1024  # about 200 words, with room
GRAPH_TOKENS = 1024  # entities, relations
CONTRADICTIONS_TOKENS = 256  # a list of small ids


def parse_items(
    data: dict[str, Any], key: str, model: type[Item], tool: str
) -> tuple[list[Item], list[str]]:
    """The items of the tool input's list `key`, validated one by one: an item that does not
    fit is dropped with a note (the others are used); a missing or non-list `key` is a
    malformed reply (ModelOutputError)."""
    raw = data.get(key)
    if not isinstance(raw, list):
        raise ModelOutputError(f"{tool} input is malformed: {key!r} is not a list")
    items: list[Item] = []
    notes: list[str] = []
    for index, item in enumerate(raw):
        try:
            items.append(model.model_validate(item))
        except ValidationError as exc:
            problem = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'item'}: {e['msg']}" for e in exc.errors()
            )
            notes.append(f"{tool} item {index} dropped ({problem})"[:300])
    return items, notes


class _Procedure(BaseModel):
    summary: str = Field(min_length=1, max_length=20_000)


EXTRACT_TOOL = _tool(
    "record_facts",
    "Record the durable facts worth remembering from the new messages.",
    _Facts,
)


class _Summary(BaseModel):
    summary: str = Field(max_length=8_000)


SUMMARY_TOOL = _tool(
    "record_summary",
    "Record the updated running summary of the conversation.",
    _Summary,
)
PROCEDURE_TOOL = _tool(
    "record_procedure",
    "Record the step-by-step summary of the agent's work.",
    _Procedure,
)
DECIDE_TOOL = _tool(
    "record_decisions",
    "For each candidate fact, decide ADD, UPDATE, DELETE or NONE.",
    _Decisions,
)


class _EntityOut(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    type: str = Field(default="", max_length=50)


class _Entities(BaseModel):
    entities: list[_EntityOut]


class _TripleOut(BaseModel):
    source: str = Field(min_length=1, max_length=200)
    relationship: str = Field(min_length=1, max_length=100)
    destination: str = Field(min_length=1, max_length=200)
    fact: int = Field(ge=0)


class _Relations(BaseModel):
    relations: list[_TripleOut]


class _Contradicted(BaseModel):
    contradicted: list[str]


ENTITIES_TOOL = _tool(
    "record_entities",
    "Record the entities the facts are about, each with its type.",
    _Entities,
)
RELATIONS_TOOL = _tool(
    "record_relations",
    "Record the relations between the listed entities that the facts state.",
    _Relations,
)
CONTRADICTIONS_TOOL = _tool(
    "record_contradictions",
    "Record the ids of the existing relations the new relations make false.",
    _Contradicted,
)


Whole = TypeVar("Whole", bound=BaseModel)


def parse_whole(model: type[Whole], data: dict[str, Any], tool: str) -> Whole:
    """A tool input read as one object: malformed as a whole, or not at all."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ModelOutputError(f"{tool} input is malformed: {exc}") from None


def map_decisions(
    raw: Sequence[_DecisionOut], facts: Sequence[Fact], shown: dict[str, uuid.UUID]
) -> Decisions:
    """Map the model's small ids back to memories; drop what cannot be trusted, saying why."""
    result = Decisions()
    for item in raw:
        if item.fact >= len(facts):
            result.rejected.append(f"decision for unknown candidate {item.fact}")
            continue
        memory_id = None
        if item.event != "ADD":
            if item.id is None or item.id not in shown:
                result.rejected.append(f"{item.event} names id {item.id!r}, which was not shown")
                continue
            memory_id = shown[item.id]
        text = (item.text or facts[item.fact].text).strip()
        result.decisions.append(Decision(item.event, item.fact, memory_id, text))
    return result


# The profile call's max_tokens: a profile is one object of a few fields.
PROFILE_TOKENS = 2048
PROFILE_TOOL_NAME = "record_profile"
# What a profile field may hold, by its JSON Schema type.
_PROFILE_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}
PROFILE_VALUE_MAX_CHARS = 4000


def profile_tool(schema: dict[str, Any]) -> ToolParam:
    """The forced tool of a profile: its input schema is the project's profile schema (its
    properties, none required: a field the memories say nothing about is left out)."""
    properties = schema.get("properties") or {}
    return {
        "name": PROFILE_TOOL_NAME,
        "description": "Record the user's profile: each field as its description asks.",
        "input_schema": {"type": "object", "properties": properties},
    }


def profile_value_fits(spec: dict[str, Any], value: Any) -> bool:
    """Whether `value` may fill the profile field `spec` (its type, items' type, size)."""
    if value is None or value in ("", [], {}):
        return False
    kind = spec.get("type")
    if isinstance(kind, str) and kind in _PROFILE_TYPES:
        if isinstance(value, bool) and kind != "boolean":
            return False
        if not isinstance(value, _PROFILE_TYPES[kind]):
            return False
    items = spec.get("items")
    if (
        isinstance(value, list)
        and isinstance(items, dict)
        and not all(profile_value_fits(items, v) for v in value)
    ):
        return False
    enum = spec.get("enum")
    if isinstance(enum, list) and value not in enum:
        return False
    return len(repr(value)) <= PROFILE_VALUE_MAX_CHARS


def parse_profile(data: dict[str, Any], schema: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The fields of the tool input that the schema has and whose values fit, in the schema's
    order; the others are dropped with a note."""
    properties: dict[str, Any] = schema.get("properties") or {}
    notes.extend(
        f"{PROFILE_TOOL_NAME}: field {name[:64]!r} is not in the schema"
        for name in data
        if name not in properties
    )
    found: dict[str, Any] = {}
    for name, spec in properties.items():
        if name not in data:
            continue
        if profile_value_fits(spec, data[name]):
            found[name] = data[name]
        elif data[name] not in (None, "", [], {}):
            notes.append(f"{PROFILE_TOOL_NAME}: field {name!r} does not fit its schema")
    return found
