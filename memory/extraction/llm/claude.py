"""Claude through the official anthropic SDK: `ClaudeExtractor`.

Every call is one forced tool use (llm.schemas), its reply checked before it is read: a refusal
fails at once, a reply cut off at max_tokens is asked for again with the full budget, a missing
or malformed tool input once more (the same request with a note of what was wrong: `reasked`);
what every call cost is summed in a Usage. Images and PDFs of
the new messages go along as content blocks. Retries of the API's own failures (429, 5xx,
timeouts) are the SDK's, except that a long Retry-After is not waited out in a worker: the
event's own retry waits for it (`requested_wait`, extraction.pipeline.backoff).

May import llm.types, llm.schemas, llm.prompts and llm.clean (and the anthropic SDK, httpx).
"""

from __future__ import annotations

import email.utils
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any, Literal, TypeVar

import anthropic
import httpx
from anthropic.types import (
    ContentBlockParam,
    DocumentBlockParam,
    ImageBlockParam,
    MessageParam,
    TextBlockParam,
    ToolChoiceToolParam,
    ToolParam,
)

from memory.extraction.llm.clean import clean_entities, clean_relations
from memory.extraction.llm.prompts import (
    CONTRADICTIONS_SYSTEM,
    DECIDE_SYSTEM,
    ENTITIES_SYSTEM,
    PROCEDURE_SYSTEM,
    PROFILE_SYSTEM,
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
from memory.parts import IMAGE, PDF

T = TypeVar("T")

# The SDK waits as long as a Retry-After header asks, without a bound. Within one attempt a
# worker waits at most this long (the lease is sized for it); a longer wait is left to the
# event's own retry with backoff (extraction.pipeline), so no worker thread sleeps for an hour.
MAX_RETRY_AFTER_SECONDS = 8.0


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """What the server asks to wait (Retry-After-Ms, Retry-After in seconds or as a date)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers[name]) * scale
        except (KeyError, ValueError):
            continue
    try:
        when = email.utils.parsedate_to_datetime(headers["retry-after"])
    except (KeyError, TypeError, ValueError):
        return None
    return (when - datetime.now(tz=when.tzinfo or UTC)).total_seconds()


def no_long_retry_waits(response: httpx.Response) -> None:
    """httpx response hook: a response asking for a long wait is not retried by the SDK."""
    wait = retry_after_seconds(response.headers)
    if wait is not None and wait > MAX_RETRY_AFTER_SECONDS:
        response.headers["x-should-retry"] = "false"


def requested_wait(failure: BaseException) -> float | None:
    """Seconds the model API asked a failed call to wait (Retry-After on a 429 or 5xx), if
    `failure` is its answer; the event's next attempt comes no sooner (extraction.pipeline)."""
    if not isinstance(failure, anthropic.APIStatusError):
        return None
    return retry_after_seconds(failure.response.headers)


class ClaudeExtractor:
    name = "claude"
    reads_attachments = True

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        max_tokens: int,
        timeout: float,
        max_retries: int,
        base_url: str | None = None,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.client = anthropic.Anthropic(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            http_client=anthropic.DefaultHttpxClient(
                event_hooks={"response": [no_long_retry_waits]}
            ),
        )

    def _call(
        self,
        system: str | list[TextBlockParam],
        prompt: str,
        tool: ToolParam,
        parse: Callable[[dict[str, Any], list[str]], T],
        attached: Sequence[Turn] = (),
        *,
        budget: int | None = None,
    ) -> tuple[T, Usage]:
        """One forced tool call, its input read by `parse` (which may note dropped items, and
        raises ModelOutputError when the input as a whole is unusable); the images and PDFs of
        `attached` follow the prompt as blocks.

        `budget` is the call's max_tokens, capped by ENGRAM_LLM_MAX_TOKENS. The reply is
        checked before it is parsed: a refusal fails at once; a reply cut off at max_tokens is
        asked for again with the full ENGRAM_LLM_MAX_TOKENS; no tool call, or a malformed tool
        input, is asked for once more (`reasked`: the same request, a note of what was wrong
        appended), then fails with the reason. So a call is made at most three times: once,
        once more with the full budget, once more with the note. Thinking is off (a forced tool
        call cannot think).
        """
        blocks = attachment_blocks(attached)
        text: TextBlockParam = {"type": "text", "text": prompt}
        content: str | list[ContentBlockParam] = [text, *blocks] if blocks else prompt
        messages: list[MessageParam] = [{"role": "user", "content": content}]
        choice: ToolChoiceToolParam = {"type": "tool", "name": tool["name"]}
        name = tool["name"]
        usage = Usage()
        limit = min(budget or self.max_tokens, self.max_tokens)
        problem = ""
        reasked = False
        while True:
            response = self.client.messages.create(
                model=self.model,
                max_tokens=limit,
                system=system,
                messages=messages,
                tools=[tool],
                tool_choice=choice,
                thinking={"type": "disabled"},
            )
            usage.add(Usage.of(response.usage))
            if response.stop_reason == "refusal":
                raise ModelOutputError(f"the model refused the {name} call", usage)
            if response.stop_reason == "max_tokens":
                problem = f"the {name} reply was cut off at max_tokens ({limit})"
                if limit >= self.max_tokens:
                    break  # as long as allowed already
                limit = self.max_tokens
                continue
            data = next(
                (
                    dict(b.input)
                    for b in response.content
                    if b.type == "tool_use" and b.name == name
                ),
                None,
            )
            if data is None:
                problem = f"the model did not call {name}"
            else:
                notes: list[str] = []
                try:
                    result = parse(data, notes)
                except ModelOutputError as exc:
                    problem = str(exc)
                else:
                    usage.notes += notes
                    return result, usage
            if reasked:
                problem += " (asked twice)"
                break
            reasked = True
            messages = [{"role": "user", "content": reasked_content(content, name, problem)}]
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


# The note appended to a request asked again after an unusable reply, and the most of the
# problem it quotes (a validation error can be long).
REASK_NOTE = (
    "Your previous reply could not be used: {problem}. Call the {name} tool once more, with an "
    "input that matches its schema exactly."
)
REASK_PROBLEM_CHARS = 500


def reasked_content(
    content: str | list[ContentBlockParam], name: str, problem: str
) -> str | list[ContentBlockParam]:
    """The first request's content with a note of what was wrong with its reply appended."""
    note = REASK_NOTE.format(problem=problem[:REASK_PROBLEM_CHARS], name=name)
    if isinstance(content, str):
        return f"{content}\n\n{note}"
    block: TextBlockParam = {"type": "text", "text": note}
    return [*content, block]


ImageMediaType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
IMAGE_MEDIA_TYPES: dict[str, ImageMediaType] = {
    "image/jpeg": "image/jpeg",
    "image/png": "image/png",
    "image/gif": "image/gif",
    "image/webp": "image/webp",
}


def attachment_blocks(turns: Sequence[Turn]) -> list[ContentBlockParam]:
    """The images and PDFs of `turns` as Messages API blocks, each after a line naming its
    message: URLs as URL sources (Claude fetches them; engram does not), data as base64."""
    blocks: list[ContentBlockParam] = []
    for turn in turns:
        part = turn.part
        if part is None or part.type not in (IMAGE, PDF):
            continue
        label = "image" if part.type == IMAGE else "PDF"
        blocks.append({"type": "text", "text": f"The {label} of message [{turn.position}]:"})
        if part.type == PDF:
            document: DocumentBlockParam = {
                "type": "document",
                "source": {"type": "url", "url": part.url},
            }
            blocks.append(document)
            continue
        image: ImageBlockParam = {"type": "image", "source": {"type": "url", "url": part.url}}
        if part.data:
            media_type = IMAGE_MEDIA_TYPES[part.media_type]
            image["source"] = {"type": "base64", "media_type": media_type, "data": part.data}
        blocks.append(image)
    return blocks
