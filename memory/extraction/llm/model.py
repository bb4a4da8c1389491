"""What every model-backed extractor shares: `ModelExtractor`.

Each step (facts, decisions, procedure, summary, entities, relations, contradictions, profile)
is built here once, for every provider: its prompt (llm.prompts), its forced tool (llm.schemas)
and how the reply is read. A provider (llm.claude, llm.openai_compat) only sends one request and
says how it ended (`_ask`, an `Answer`); the checks around it are the same for all: a refusal
fails at once, a reply cut off at max_tokens is asked for again with the full budget, a missing
or malformed answer once more with a note of what was wrong (`REASK_NOTE`), then the call fails
with the reason (ModelOutputError). What every call cost is summed in a Usage.

May import llm.types, llm.schemas, llm.prompts and llm.clean.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal, TypeVar

from anthropic.types import TextBlockParam, ToolParam
from opentelemetry.trace import SpanKind

from config import metrics, tracing
from memory.extraction.llm.clean import clean_entities, clean_relations
from memory.extraction.llm.prompts import (
    CONTRADICTIONS_SYSTEM,
    DECIDE_SYSTEM,
    ENTITIES_SYSTEM,
    PROCEDURE_SYSTEM,
    PROFILE_SYSTEM,
    REASK_NOTE,
    REASK_PROBLEM_CHARS,
    RELATIONS_SYSTEM,
    SUMMARY_SYSTEM,
    extract_system,
    extraction_prompt,
    format_facts,
    format_turns,
)
from memory.extraction.llm.schemas import (
    CONTRADICTIONS_TOKENS,
    CONTRADICTIONS_TOOL,
    DECIDE_TOKENS_BASE,
    DECIDE_TOKENS_PER_FACT,
    DECIDE_TOOL,
    ENTITIES_TOOL,
    EXTRACT_TOOL,
    GRAPH_TOKENS,
    PROCEDURE_TOOL,
    PROFILE_TOKENS,
    RELATIONS_TOOL,
    SUMMARY_TOKENS,
    SUMMARY_TOOL,
    _Contradicted,
    _DecisionOut,
    _EntityOut,
    _FactOut,
    _Procedure,
    _Summary,
    _TripleOut,
    map_decisions,
    parse_items,
    parse_profile,
    parse_whole,
    profile_tool,
)
from memory.extraction.llm.types import (
    Context,
    Contradictions,
    Decisions,
    EntityRef,
    Existing,
    Fact,
    KnownEdge,
    ModelOutputError,
    Relations,
    Triple,
    Turn,
    Usage,
)

T = TypeVar("T")

# A system prompt: plain text, or text blocks (the first may be marked cacheable).
System = str | list[TextBlockParam]


@dataclass
class Answer:
    """How one request ended: `done` with the tool input (`data`; None when the reply held no
    usable input, `problem` says why), `cut` off at max_tokens, or `refused`."""

    ending: Literal["done", "cut", "refused"]
    usage: Usage
    data: dict[str, Any] | None = None
    problem: str = ""


def system_text(system: System) -> str:
    """A system prompt as one text (for a provider without text blocks)."""
    if isinstance(system, str):
        return system
    return "\n\n".join(block["text"] for block in system)


class ModelExtractor:
    """The steps of extraction with a model; a provider implements `_ask`."""

    name = "model"
    model: str
    max_tokens: int
    # The kinds of attachment (memory.parts IMAGE, PDF) the model is shown; others are skipped
    # with a note on the event (extraction.context.skipped_parts).
    attachments: frozenset[str] = frozenset()

    def _ask(
        self,
        system: System,
        prompt: str,
        *,
        attached: Sequence[Turn],
        tool: ToolParam,
        limit: int,
        note: str,
    ) -> Answer:
        """Send one request forcing `tool` (with `note` after the prompt when not empty)."""
        raise NotImplementedError

    def _counted(self, step: str, system: System, prompt: str, **request: Any) -> Answer:
        """`_ask`, timed and counted by outcome (config.metrics MODEL_CALLS, MODEL_TOKENS)."""
        started = time.perf_counter()
        outcome = "other"
        attributes = {"engram.provider": self.name, "engram.step": step, "engram.model": self.model}
        with tracing.span("model.call", attributes, kind=SpanKind.CLIENT) as span:
            try:
                answer = self._ask(system, prompt, **request)
                outcome = {"refused": "refused", "cut": "cut"}.get(str(answer.ending), "ok")
                metrics.count_tokens(self.name, self.model, answer.usage)
                if span is not None:
                    span.set_attribute("engram.input_tokens", answer.usage.input_tokens)
                    span.set_attribute("engram.output_tokens", answer.usage.output_tokens)
                return answer
            except Exception as exc:
                outcome = metrics.failure_kind(exc)
                raise
            finally:
                if span is not None:
                    span.set_attribute("engram.outcome", outcome)
                metrics.MODEL_CALLS.labels(provider=self.name, step=step, outcome=outcome).observe(
                    time.perf_counter() - started
                )

    def _call(
        self,
        system: System,
        prompt: str,
        tool: ToolParam,
        parse: Callable[[dict[str, Any], list[str]], T],
        attached: Sequence[Turn] = (),
        *,
        budget: int | None = None,
    ) -> tuple[T, Usage]:
        """One forced tool call, its input read by `parse` (which may note dropped items, and
        raises ModelOutputError when the input as a whole is unusable); the attachments of
        `attached` follow the prompt.

        `budget` is the call's max_tokens, capped by ENGRAM_LLM_MAX_TOKENS. The reply is
        checked before it is parsed: a refusal fails at once; a reply cut off at max_tokens is
        asked for again with the full ENGRAM_LLM_MAX_TOKENS; no usable input is asked for once
        more (the same request, a note of what was wrong appended), then fails with the reason.
        So a call is made at most three times: once, once more with the full budget, once more
        with the note.
        """
        name = tool["name"]
        usage = Usage(model=self.model)
        limit = min(budget or self.max_tokens, self.max_tokens)
        problem = note = ""
        while True:
            answer = self._counted(
                name, system, prompt, attached=attached, tool=tool, limit=limit, note=note
            )
            usage.add(answer.usage)
            if answer.ending == "refused":
                raise ModelOutputError(f"the model refused the {name} call", usage)
            if answer.ending == "cut":
                problem = f"the {name} reply was cut off at max_tokens ({limit})"
                if limit >= self.max_tokens:
                    break  # as long as allowed already
                limit = self.max_tokens
                continue
            if answer.data is None:
                problem = answer.problem or f"the model did not call {name}"
            else:
                notes: list[str] = []
                try:
                    result = parse(answer.data, notes)
                except ModelOutputError as exc:
                    problem = str(exc)
                else:
                    usage.notes += notes
                    return result, usage
            if note:
                problem += " (asked twice)"
                break
            note = REASK_NOTE.format(problem=problem[:REASK_PROBLEM_CHARS], name=name)
        raise ModelOutputError(problem, usage)

    def extract(self, context: Context) -> tuple[list[Fact], Usage]:
        system = extract_system(context)
        positions = {t.position for t in context.new_messages}

        def parse(data: dict[str, Any], notes: list[str]) -> list[Fact]:
            items, dropped = parse_items(data, "facts", _FactOut, "record_facts")
            notes += dropped
            return [
                Fact(
                    f.text.strip(),
                    f.category,
                    f.confidence,
                    tuple(p for p in f.positions if p in positions),
                )
                for f in items
                if f.text.strip()
            ]

        return self._call(
            system, extraction_prompt(context), EXTRACT_TOOL, parse, context.new_messages
        )

    def decide(
        self,
        facts: Sequence[Fact],
        existing: Sequence[Sequence[Existing]],
        observed_on: date | None = None,
    ) -> tuple[Decisions, Usage]:
        shown: dict[str, uuid.UUID] = {}
        lines = []
        if observed_on is not None:
            lines.append(f"The candidates were observed on {observed_on.isoformat()}.")
        for index, (fact, neighbours) in enumerate(zip(facts, existing, strict=True)):
            lines.append(f"Candidate {index}: {fact.text}")
            for memory in neighbours:
                small_id = next((k for k, v in shown.items() if v == memory.id), str(len(shown)))
                shown[small_id] = memory.id
                when = f" (observed {memory.when.isoformat()})" if memory.when else ""
                lines.append(f"  existing id {small_id}{when}: {memory.text}")

        def parse(data: dict[str, Any], notes: list[str]) -> Decisions:
            items, dropped = parse_items(data, "decisions", _DecisionOut, "record_decisions")
            decisions = map_decisions(items, facts, shown)
            decisions.rejected[:0] = dropped
            return decisions

        budget = DECIDE_TOKENS_BASE + DECIDE_TOKENS_PER_FACT * len(facts)
        return self._call(DECIDE_SYSTEM, "\n".join(lines), DECIDE_TOOL, parse, budget=budget)

    def procedure(self, context: Context) -> tuple[str, Usage]:
        def parse(data: dict[str, Any], notes: list[str]) -> str:
            return parse_whole(_Procedure, data, "record_procedure").summary.strip()

        return self._call(
            PROCEDURE_SYSTEM,
            extraction_prompt(context),
            PROCEDURE_TOOL,
            parse,
            context.new_messages,
        )

    def summarize(self, previous: str, turns: Sequence[Turn]) -> tuple[str | None, Usage]:
        prompt = (
            f"## Previous summary\n{previous or '(none yet)'}\n\n"
            f"## New messages\n{format_turns(turns)}"
        )

        def parse(data: dict[str, Any], notes: list[str]) -> str | None:
            return parse_whole(_Summary, data, "record_summary").summary.strip()

        return self._call(SUMMARY_SYSTEM, prompt, SUMMARY_TOOL, parse, budget=SUMMARY_TOKENS)

    def entities(
        self, facts: Sequence[Fact], self_name: str | None
    ) -> tuple[list[EntityRef], Usage]:
        system = ENTITIES_SYSTEM.format(self_name=json.dumps(self_name or "User"))

        def parse(data: dict[str, Any], notes: list[str]) -> list[EntityRef]:
            items, dropped = parse_items(data, "entities", _EntityOut, "record_entities")
            notes += dropped
            return clean_entities([EntityRef(e.name, e.type) for e in items], self_name)

        return self._call(system, format_facts(facts), ENTITIES_TOOL, parse, budget=GRAPH_TOKENS)

    def relations(
        self, facts: Sequence[Fact], entities: Sequence[EntityRef], self_name: str | None
    ) -> tuple[Relations, Usage]:
        listed = "\n".join(f"- {e.name} ({e.type})" if e.type else f"- {e.name}" for e in entities)
        prompt = f"## Entities\n{listed}\n\n## Facts\n{format_facts(facts)}"

        def parse(data: dict[str, Any], notes: list[str]) -> Relations:
            items, dropped = parse_items(data, "relations", _TripleOut, "record_relations")
            raw = [Triple(t.source, t.relationship, t.destination, t.fact) for t in items]
            found = clean_relations(raw, entities, self_name, len(facts))
            found.rejected[:0] = dropped
            return found

        return self._call(RELATIONS_SYSTEM, prompt, RELATIONS_TOOL, parse, budget=GRAPH_TOKENS)

    def contradictions(
        self, triples: Sequence[Triple], edges: Sequence[KnownEdge]
    ) -> tuple[Contradictions, Usage]:
        shown = {str(n): edge.id for n, edge in enumerate(edges)}
        lines = ["## Existing relations"]
        lines += [
            f"id {n}: {e.source} -- {e.relationship} --> {e.destination}"
            for n, e in enumerate(edges)
        ]
        lines.append("\n## New relations")
        lines += [f"{t.source} -- {t.relationship} --> {t.destination}" for t in triples]

        def parse(data: dict[str, Any], notes: list[str]) -> Contradictions:
            parsed = parse_whole(_Contradicted, data, "record_contradictions")
            result = Contradictions()
            for small_id in dict.fromkeys(parsed.contradicted):
                if small_id in shown:
                    result.edge_ids.append(shown[small_id])
                else:
                    result.rejected.append(
                        f"contradiction names id {small_id!r}, which was not shown"
                    )
            return result

        return self._call(
            CONTRADICTIONS_SYSTEM,
            "\n".join(lines),
            CONTRADICTIONS_TOOL,
            parse,
            budget=CONTRADICTIONS_TOKENS,
        )

    def profile(
        self, schema: dict[str, Any], instructions: str, prompt: str
    ) -> tuple[dict[str, Any], Usage]:
        """One user's profile: the fields of `schema` the prompt's memories fill (the others
        left out); the project's `instructions` follow the fixed system prompt."""
        system = PROFILE_SYSTEM
        if instructions.strip():
            system += "\n\n## The operator's instructions\n" + instructions.strip()

        def parse(data: dict[str, Any], notes: list[str]) -> dict[str, Any]:
            return parse_profile(data, schema, notes)

        return self._call(system, prompt, profile_tool(schema), parse, budget=PROFILE_TOKENS)
