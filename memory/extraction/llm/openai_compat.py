"""Any model behind OpenAI's Chat Completions API, through the official openai SDK:
`OpenAIExtractor` (OpenAI itself, Ollama, vLLM, LM Studio, ...).

The steps, prompts and checks are llm.model's, the same as Claude's; here is only how one
request is sent and its reply read. The model is made to answer in the step's schema one of
two ways (ENGRAM_OPENAI_OUTPUT):
- "tools": a forced function call whose parameters are the schema;
- "json_schema": structured output (`response_format`), the schema also written into the system
  prompt, for a server that ignores `response_format`;
- "auto": tools, switching to json_schema for good the first time the endpoint refuses a tools
  request (400) and then accepts the same request with structured output.
The output budget is sent as `max_tokens`, or as `max_completion_tokens` from the first time the
endpoint refuses the former (OpenAI's reasoning models).

Whatever the mode, the reply is read where it is: a function call's arguments, or else a JSON
object in the message's text (a server that ignores tools and `response_format` but answers
JSON); anything else is no usable answer, asked for once more by llm.model. A reply cut off
(`finish_reason` "length") or refused (`refusal`, "content_filter") ends as for Claude. Retries
of the API's own failures (429, 5xx, timeouts) are the SDK's, a long Retry-After left to the
event's retry (llm.waits). Usage: prompt tokens, the cached ones counted as cache reads.

May import llm.types, llm.model and llm.waits (and the openai SDK).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Any, Literal

import openai
from anthropic.types import ToolParam
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionContentPartParam,
    ChatCompletionMessage,
    ChatCompletionMessageParam,
)

from memory.extraction.llm.model import Answer, ModelExtractor, System, system_text
from memory.extraction.llm.types import Turn, Usage
from memory.extraction.llm.waits import no_long_retry_waits
from memory.parts import IMAGE

logger = logging.getLogger(__name__)

Output = Literal["auto", "tools", "json_schema"]

# Written after the system prompt when the schema is asked for as structured output: a server
# that ignores `response_format` still learns what to answer.
JSON_ANSWER = (
    "Answer with one JSON object and nothing else (no prose, no code fence). It is the input of "
    "the {name} tool ({description}) and must match this JSON schema:\n{schema}"
)
# A JSON object inside a reply's text: fenced in ``` or bare.
_FENCED = re.compile(r"```(?:json)?\s*(\{.*\})\s*```", re.DOTALL)


class OpenAIExtractor(ModelExtractor):
    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        max_tokens: int,
        timeout: float,
        max_retries: int,
        api_key: str | None = None,
        output: Output = "auto",
        images: bool = False,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.output = output
        # How requests ask for the schema now ("auto" starts with tools).
        self.mode: Literal["tools", "json_schema"] = (
            "json_schema" if output == "json_schema" else "tools"
        )
        self.attachments = frozenset({IMAGE}) if images else frozenset()
        # The name of the output budget: max_tokens, which every compatible server takes, or
        # max_completion_tokens once OpenAI refuses the other (its reasoning models).
        self.tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
        self.client = openai.OpenAI(
            # A local server takes any key; the SDK insists on one.
            api_key=api_key or "none",
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
            http_client=openai.DefaultHttpxClient(event_hooks={"response": [no_long_retry_waits]}),
        )

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
        content = self._content(prompt, attached, note)
        mode = self.mode
        while True:
            try:
                response = self._create(system, content, tool, limit, mode)
                break
            except openai.BadRequestError as exc:
                # OpenAI's reasoning models take the budget as max_completion_tokens only.
                if self.tokens_field == "max_tokens" and "max_completion_tokens" in str(exc):
                    self.tokens_field = "max_completion_tokens"
                    continue
                # The endpoint may not take tools: the same request with structured output.
                if self.output == "auto" and mode == "tools":
                    mode = "json_schema"
                    continue
                raise
        if mode != self.mode:  # only once such a request was accepted
            logger.warning(
                "the model endpoint refused a tools request and took structured output: "
                "using structured output (response_format json_schema) from now on"
            )
            self.mode = mode
        return read_reply(response, tool["name"])

    def _content(
        self, prompt: str, attached: Sequence[Turn], note: str
    ) -> str | list[ChatCompletionContentPartParam]:
        """The user message: the prompt, the images of `attached` when the model is shown
        them (each after a line naming its message), then the note."""
        parts: list[ChatCompletionContentPartParam] = []
        for turn in attached:
            part = turn.part
            if part is None or part.type not in self.attachments:
                continue
            url = f"data:{part.media_type};base64,{part.data}" if part.data else part.url
            parts.append({"type": "text", "text": f"The image of message [{turn.position}]:"})
            parts.append({"type": "image_url", "image_url": {"url": url}})
        text = f"{prompt}\n\n{note}" if note else prompt
        if not parts:
            return text
        return [{"type": "text", "text": text}, *parts]

    def _create(
        self,
        system: System,
        content: str | list[ChatCompletionContentPartParam],
        tool: ToolParam,
        limit: int,
        mode: Literal["tools", "json_schema"],
    ) -> ChatCompletion:
        schema = inline_refs(dict(tool["input_schema"]))
        name, description = tool["name"], tool.get("description", "")
        instructions = system_text(system)
        if mode == "json_schema":
            answer = JSON_ANSWER.format(
                name=name, description=description, schema=json.dumps(schema)
            )
            instructions = f"{instructions}\n\n{answer}"
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": instructions},
            {"role": "user", "content": content},
        ]
        if mode == "tools":
            return self.client.chat.completions.create(
                model=self.model,
                messages=messages,
                max_tokens=limit if self.tokens_field == "max_tokens" else openai.omit,
                max_completion_tokens=limit if self.tokens_field != "max_tokens" else openai.omit,
                tools=[
                    {
                        "type": "function",
                        "function": {
                            "name": name,
                            "description": description,
                            "parameters": schema,
                        },
                    }
                ],
                tool_choice={"type": "function", "function": {"name": name}},
            )
        return self.client.chat.completions.create(
            model=self.model,
            messages=messages,
            max_tokens=limit if self.tokens_field == "max_tokens" else openai.omit,
            max_completion_tokens=limit if self.tokens_field != "max_tokens" else openai.omit,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": name, "description": description, "schema": schema},
            },
        )


def read_reply(response: ChatCompletion, name: str) -> Answer:
    """How a Chat Completions reply ended, and the input it gives the tool `name`."""
    usage = usage_of(response)
    if not response.choices:
        return Answer("done", usage, problem=f"the {name} reply held no choice")
    choice = response.choices[0]
    message = choice.message
    if message.refusal or choice.finish_reason == "content_filter":
        return Answer("refused", usage)
    if choice.finish_reason == "length":
        return Answer("cut", usage)
    data, problem = tool_input(message, name)
    return Answer("done", usage, data, problem)


def tool_input(message: ChatCompletionMessage, name: str) -> tuple[dict[str, Any] | None, str]:
    """The tool input a reply gives: the arguments of its call of `name` (or of its only
    call), or else a JSON object in its text; or None and what was wrong."""
    calls = [c for c in message.tool_calls or () if c.type == "function"]
    chosen = next((c for c in calls if c.function.name == name), None)
    if chosen is None and len(calls) == 1:
        chosen = calls[0]
    if chosen is not None:
        data = json_object(chosen.function.arguments, name)
        if data is None:
            return None, f"the arguments of the {name} call are not a JSON object"
        return data, ""
    text = (message.content or "").strip()
    data = json_object(text, name)
    if data is None:
        shown = f": {text[:80]!r}" if text else " (an empty reply)"
        return None, f"the model did not call {name} nor answer a JSON object{shown}"
    return data, ""


def json_object(text: str, name: str) -> dict[str, Any] | None:
    """The JSON object `text` holds (fenced or bare), unwrapped when the model wrote the whole
    call ({"name": name, "arguments": {...}}); None when it holds none."""
    fenced = _FENCED.search(text)
    candidates = [fenced.group(1)] if fenced else []
    candidates.append(text)
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        wrapped = data.get("arguments", data.get("parameters"))
        if data.get("name") == name and isinstance(wrapped, dict):
            return wrapped
        if isinstance(wrapped, str) and data.get("name") == name:
            return json_object(wrapped, name)
        return data
    return None


def usage_of(response: ChatCompletion) -> Usage:
    """One call's usage: the prompt's cached tokens are cache reads, not input."""
    usage = response.usage
    if usage is None:  # some servers leave it out
        return Usage(1)
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    return Usage(1, max(usage.prompt_tokens - cached, 0), usage.completion_tokens, 0, cached)


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its `$ref`s to `$defs` written out in place (the schemas have no cycles):
    not every server's structured output follows references."""
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved
