"""Extraction with a model behind an OpenAI-compatible endpoint (issue #30): the official openai
SDK against the local fake's Chat Completions.

The pipeline, decision, prompt, summary and graph tests written for Claude run again here
unchanged, with the OpenAI extractor (forced function calls, and structured output); then what
only this provider has: how the schema is asked for, endpoints that refuse tools or ignore both
tools and `response_format`, replies in every broken shape, the API's failures, usage with
cached prompt tokens, images, profiles, and a real worker configured by ENGRAM_LLM_PROVIDER.
"""

from __future__ import annotations

import uuid
from datetime import date
from typing import Any

import pytest
from django.test import override_settings

import tests.memory.test_graph_extraction as graph_tests
import tests.memory.test_pipeline as pipeline_tests
from memory.extraction import profiles
from memory.extraction.llm.model import ModelExtractor
from memory.extraction.llm.openai_compat import OpenAIExtractor, Output
from memory.extraction.llm.types import Context, Existing, Fact, ModelOutputError, Turn
from memory.extraction.llm.waits import requested_wait
from memory.extraction.pipeline import attempt, backoff
from memory.models import Memory, MemoryEvent
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, auth, make_key
from tests.fake_anthropic import FakeClaude, Reply
from tests.memory.test_events import start_worker, stop, wait_for
from tests.memory.test_profiles import FACTS, SCHEMA, enable, profile_of

MODEL = "qwen3:8b"


def local(
    fake: FakeClaude, *, output: Output = "tools", retries: int = 0, images: bool = False
) -> OpenAIExtractor:
    return OpenAIExtractor(
        base_url=f"{fake.url}/v1", model=MODEL, max_tokens=512, timeout=5,
        max_retries=retries, api_key="sk-local", output=output, images=images,
    )  # fmt: skip


def context(*texts: str) -> Context:
    turns = [Turn(i, "user", t) for i, t in enumerate(texts)]
    return Context(new_messages=turns, observed_on=date(2026, 11, 22))


TEA = Reply({"facts": [{"text": "User likes tea", "confidence": 0.9, "positions": [0]}]})


# --- the Claude path's tests, with an OpenAI-compatible model --------------------------------


class _ToolCalls:
    """The extraction tests' model: an OpenAI-compatible endpoint, forced function calls."""

    output: Output = "tools"
    model: ModelExtractor

    @pytest.fixture(autouse=True)
    def _model(self, fake_claude: FakeClaude) -> None:
        self.fake = fake_claude
        self.model = local(fake_claude, output=self.output)


class _StructuredOutput(_ToolCalls):
    output: Output = "json_schema"


class PipelineWithToolCallsTestCase(_ToolCalls, pipeline_tests.PipelineTestCase):
    pass


class PipelineWithStructuredOutputTestCase(_StructuredOutput, pipeline_tests.PipelineTestCase):
    pass


class DecisionRulesTestCase(_ToolCalls, pipeline_tests.DecisionRulesTestCase):
    pass


class PromptTestCase(_StructuredOutput, pipeline_tests.PromptTestCase):
    pass


class SummaryCadenceTestCase(_ToolCalls, pipeline_tests.SummaryCadenceTestCase):
    pass


class GraphExtractionTestCase(_ToolCalls, graph_tests.GraphExtractionTestCase):
    pass


# --- the request ------------------------------------------------------------------------------


def test_a_forced_function_call_carries_the_schema_written_out(fake_claude: FakeClaude) -> None:
    fake_claude.script(TEA)
    facts, usage = local(fake_claude).extract(context("I really like tea"))
    assert facts == [Fact("User likes tea", None, 0.9, (0,))]
    assert (usage.calls, usage.input_tokens, usage.output_tokens) == (1, 120, 40)
    request = fake_claude.requests[0]
    assert request["path"] == "/v1/chat/completions"
    headers = {name.lower(): value for name, value in request["headers"].items()}
    assert headers["authorization"] == "Bearer sk-local"
    body = request["body"]
    assert (body["model"], body["max_tokens"]) == (MODEL, 512)
    assert body["tool_choice"] == {"type": "function", "function": {"name": "record_facts"}}
    [tool] = body["tools"]
    assert tool["function"]["name"] == "record_facts"
    schema = tool["function"]["parameters"]
    # Written out: not every server's constrained decoding follows $ref.
    assert "$defs" not in schema and "$ref" not in str(schema)
    assert schema["properties"]["facts"]["items"]["properties"]["text"]["type"] == "string"
    system, user = body["messages"]
    assert system["role"] == "system" and "long-term memory about the user" in system["content"]
    assert user["role"] == "user" and "[0] user: I really like tea" in user["content"]
    assert "response_format" not in body


def test_structured_output_asks_for_the_schema_twice(fake_claude: FakeClaude) -> None:
    fake_claude.script(TEA)
    facts, _ = local(fake_claude, output="json_schema").extract(context("I really like tea"))
    assert [f.text for f in facts] == ["User likes tea"]
    body = fake_claude.requests[0]["body"]
    assert "tools" not in body
    response_format = body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "record_facts"
    schema = response_format["json_schema"]["schema"]
    # In the system prompt too, for a server that ignores response_format.
    assert '"facts"' in body["messages"][0]["content"]
    assert "must match this JSON schema" in body["messages"][0]["content"]
    assert schema["required"] == ["facts"]


def test_auto_detects_an_endpoint_without_tools_once(fake_claude: FakeClaude) -> None:
    fake_claude.rejects_tools = True
    model = local(fake_claude, output="auto")
    fake_claude.script(TEA, TEA)
    assert [f.text for f in model.extract(context("I like tea"))[0]] == ["User likes tea"]
    assert model.mode == "json_schema"
    assert ["tools" in r["body"] for r in fake_claude.requests] == [True, False]
    # From then on every request asks for structured output at once.
    model.extract(context("I like tea"))
    assert ["tools" in r["body"] for r in fake_claude.requests] == [True, False, False]


def test_a_reasoning_model_gets_its_budget_as_max_completion_tokens(
    fake_claude: FakeClaude,
) -> None:
    fake_claude.completion_tokens_only = True
    model = local(fake_claude)
    fake_claude.script(TEA, TEA)
    assert [f.text for f in model.extract(context("I like tea"))[0]] == ["User likes tea"]
    model.extract(context("I like tea"))
    budgets = [(r["body"].get("max_tokens"), r["body"].get("max_completion_tokens"))
               for r in fake_claude.requests]  # fmt: skip
    # Refused once, then the other name for good (and the tools kept).
    assert budgets == [(512, None), (None, 512), (None, 512)]
    assert model.mode == "tools"


def test_a_refused_tools_request_is_an_error_when_tools_are_configured(
    fake_claude: FakeClaude,
) -> None:
    fake_claude.rejects_tools = True
    fake_claude.script(TEA)
    with pytest.raises(Exception, match="tools are not supported"):
        local(fake_claude, output="tools").extract(context("I like tea"))
    assert len(fake_claude.requests) == 1


# --- what comes back --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        '{"facts": [{"text": "User likes tea"}]}',
        'Here you go:\n```json\n{"facts": [{"text": "User likes tea"}]}\n```',
        '{"name": "record_facts", "arguments": {"facts": [{"text": "User likes tea"}]}}',
        '{"name": "record_facts", "parameters": '
        '"{\\"facts\\": [{\\"text\\": \\"User likes tea\\"}]}"}',
    ],
    ids=["bare", "fenced", "the-whole-call", "arguments-as-text"],
)
def test_a_server_that_ignores_tools_and_format_but_answers_json_works(
    fake_claude: FakeClaude, raw: str
) -> None:
    fake_claude.ignores_format = True
    fake_claude.script(Reply(raw=raw))
    facts, usage = local(fake_claude).extract(context("I like tea"))
    assert ([f.text for f in facts], usage.calls) == (["User likes tea"], 1)


def test_prose_is_asked_for_once_more_with_a_note_then_fails_loudly(
    fake_claude: FakeClaude,
) -> None:
    fake_claude.ignores_format = True
    fake_claude.script(Reply(stop_reason="end_turn"), Reply(stop_reason="end_turn"))
    with pytest.raises(ModelOutputError) as raised:
        local(fake_claude).extract(context("I like tea"))
    message = str(raised.value)
    assert "did not call record_facts nor answer a JSON object" in message
    assert "I would rather answer in prose" in message and message.endswith("(asked twice)")
    assert raised.value.usage.calls == 2
    first, second = (r["prompt"] for r in fake_claude.requests)
    assert "could not be used" not in first
    assert "Your previous reply could not be used: the model did not call" in second


def test_malformed_arguments_are_asked_for_once_more(fake_claude: FakeClaude) -> None:
    fake_claude.script(Reply(raw='{"facts": [{"text": "User likes'), TEA)
    facts, usage = local(fake_claude).extract(context("I like tea"))
    assert ([f.text for f in facts], usage.calls) == (["User likes tea"], 2)
    assert "are not a JSON object" in fake_claude.requests[1]["prompt"]
    # Arguments that parse but do not fit the schema: asked again, then refused.
    fake_claude.script(Reply({"facts": "tea"}), Reply({"no": "facts"}))
    with pytest.raises(ModelOutputError, match="record_facts input is malformed"):
        local(fake_claude).extract(context("I like tea"))


def test_items_that_do_not_fit_are_dropped_one_by_one(fake_claude: FakeClaude) -> None:
    fake_claude.script(Reply({"facts": [{"text": ""}, {"text": "User likes tea"}, 7]}))
    facts, usage = local(fake_claude).extract(context("I like tea"))
    assert [f.text for f in facts] == ["User likes tea"]
    assert [n.split(" (")[0] for n in usage.notes] == [
        "record_facts item 0 dropped", "record_facts item 2 dropped"
    ]  # fmt: skip


def test_a_truncated_reply_is_asked_for_again_with_the_full_budget(
    fake_claude: FakeClaude,
) -> None:
    existing = [[Existing(uuid.uuid4(), "User lives in NYC", 0.8)]]
    fake_claude.script(
        Reply(
            {"decisions": [{"fact": 0, "event": "ADD", "text": "x" * 40}]},
            stop_reason="max_tokens",
        ),
        Reply({"decisions": [{"fact": 0, "event": "ADD", "text": "User lives in SF"}]}),
    )  # fmt: skip
    decided, _ = local(fake_claude).decide([Fact("User lives in SF")], existing)
    assert [d.text for d in decided.decisions] == ["User lives in SF"]
    assert [r["body"]["max_tokens"] for r in fake_claude.requests] == [360, 512]
    # Cut off at the full budget too: the call fails, saying so.
    fake_claude.script(Reply(TEA.tool_input, stop_reason="max_tokens"))
    with pytest.raises(ModelOutputError, match=r"cut off at max_tokens \(512\)"):
        local(fake_claude).extract(context("I like tea"))


def test_a_refusal_fails_at_once(fake_claude: FakeClaude) -> None:
    fake_claude.script(Reply(stop_reason="refusal"), TEA)
    with pytest.raises(ModelOutputError, match="refused the record_facts call"):
        local(fake_claude).extract(context("I like tea"))
    assert len(fake_claude.requests) == 1


def test_cached_prompt_tokens_are_counted_as_cache_reads(fake_claude: FakeClaude) -> None:
    fake_claude.script(Reply(TEA.tool_input, usage=(200, 30), cache=(0, 1800)))
    _, usage = local(fake_claude).extract(context("I like tea"))
    assert usage.counts() == {
        "calls": 1, "input_tokens": 200, "output_tokens": 30,
        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1800,
    }  # fmt: skip


# --- the API's own failures -------------------------------------------------------------------


def test_429_and_5xx_are_retried_by_the_sdk(fake_claude: FakeClaude) -> None:
    fake_claude.script(
        Reply(status=429, error_type="rate_limit_error", headers={"retry-after": "0"}),
        Reply(status=503, headers={"retry-after": "0"}),
        TEA,
    )
    facts, _ = local(fake_claude, retries=2).extract(context("I like tea"))
    assert [f.text for f in facts] == ["User likes tea"]
    assert len(fake_claude.requests) == 3


def test_a_long_retry_after_is_left_to_the_events_backoff(fake_claude: FakeClaude) -> None:
    fake_claude.script(Reply(status=429, headers={"retry-after": "120"}), TEA)
    with pytest.raises(Exception) as raised:
        local(fake_claude, retries=2).extract(context("I like tea"))
    assert len(fake_claude.requests) == 1  # not slept through in the worker
    assert requested_wait(raised.value) == 120.0
    assert backoff(1, requested_wait(raised.value)) == 120_000


# --- in the pipeline and the worker -----------------------------------------------------------


class OpenAIPipelineTestCase(BaseTestCase):
    @pytest.fixture(autouse=True)
    def _model(self, fake_claude: FakeClaude) -> None:
        self.fake = fake_claude

    def setUp(self) -> None:
        self.project = self.alice.key.project

    def event(self, content: Any) -> MemoryEvent:
        scope = pipeline_tests.SCOPE
        payload = {"messages": [{"role": "user", "content": content}], "scope": scope}
        with project_context(self.project.pk):
            return MemoryEvent.objects.create(project=self.project, payload=payload, **scope)

    def run_it(self, event: MemoryEvent, model: OpenAIExtractor) -> MemoryEvent:
        assert attempt(event.id, self.project.pk, model) is None
        with project_context(self.project.pk):
            return MemoryEvent.objects.get(pk=event.pk)

    def test_an_unusable_model_fails_the_event_with_the_reason_and_stores_nothing(self) -> None:
        self.fake.ignores_format = True
        self.fake.script(Reply(stop_reason="end_turn"), Reply(stop_reason="end_turn"))
        done = self.run_it(self.event("I like tea"), local(self.fake))
        assert done.status == "FAILED"
        assert "did not call record_facts" in done.error and "(asked twice)" in done.error
        assert done.usage["calls"] == 2
        with project_context(self.project.pk):
            assert not Memory.objects.exists()

    def test_a_request_the_api_refuses_fails_at_once_a_key_it_refuses_is_retried(self) -> None:
        self.fake.script(Reply(status=400, error_type="invalid_request_error"))
        event = self.event("I like tea")
        done = self.run_it(event, local(self.fake))
        assert (done.status, done.attempts) == ("FAILED", 1)
        assert "Error code: 400" in done.error
        # A key, model or endpoint the operator may fix meanwhile: retried with backoff.
        self.fake.script(Reply(status=401, error_type="authentication_error"))
        event = self.event("I like tea")
        assert attempt(event.id, self.project.pk, local(self.fake)) is not None
        with project_context(self.project.pk):
            assert MemoryEvent.objects.get(pk=event.pk).status == "PENDING"

    def test_a_model_that_answers_nothing_leaves_a_warning(self) -> None:
        self.fake.script(Reply({"facts": []}))
        done = self.run_it(self.event("I moved to Porto last month."), local(self.fake))
        assert (done.status, done.extractor) == ("SUCCEEDED", "openai")
        assert "extraction found no fact" in done.warning

    def test_images_go_to_a_vision_model_and_are_skipped_otherwise(self) -> None:
        image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}
        self.fake.script(Reply({"facts": []}))
        done = self.run_it(self.event(image), local(self.fake))
        assert "image_url skipped, the openai extractor does not read images" in done.error
        assert "image_url" not in str(self.fake.requests[-1]["body"]["messages"])
        self.fake.script(Reply({"facts": [{"text": "User has a grey cat", "positions": [0]}]}))
        done = self.run_it(self.event(image), local(self.fake, images=True))
        assert (done.status, done.error) == ("SUCCEEDED", "")
        facts_request = next(r for r in self.fake.requests[::-1] if r["tool"] == "record_facts")
        content = facts_request["body"]["messages"][1]["content"]
        assert {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}} in content
        assert {"type": "text", "text": "The image of message [0]:"} in content

    def test_a_profile_is_built_by_the_configured_provider(self) -> None:
        add_texts(self.project, FACTS, user_id="alice")
        enable(self.project.pk)
        self.fake.script(Reply({"home_city": "Lisbon", "shoe_size": "big"}, tool="record_profile"))
        with override_settings(
            ENGRAM_EXTRACTOR="openai", ENGRAM_OPENAI_BASE_URL=f"{self.fake.url}/v1",
            ENGRAM_LLM_MODEL=MODEL, ENGRAM_LLM_MAX_RETRIES=0,
        ):  # fmt: skip
            assert profiles.generate(self.project.pk, "alice") == "succeeded"
        found = profile_of(self.project.pk)
        assert (found.profile, found.generator) == ({"home_city": "Lisbon"}, "openai")
        request = self.fake.requests[-1]
        assert request["tool"] == "record_profile" and "I live in Lisbon" in request["prompt"]
        parameters = request["body"]["tools"][0]["function"]["parameters"]
        assert parameters["properties"] == SCHEMA["properties"]


def test_a_worker_configured_for_an_openai_compatible_model_extracts(
    committed_db: None, fake_claude: FakeClaude, client: Any
) -> None:
    """ENGRAM_LLM_PROVIDER=openai in a real worker's environment: the add request is extracted,
    decided and linked in the graph through the fake Chat Completions endpoint."""
    fake_claude.script(
        pipeline_tests.facts("User lives in Porto"),
        Reply({"entities": [{"name": "Porto", "type": "location"}]}, tool="record_entities"),
        Reply({"relations": [{"source": "alice", "relationship": "lives_in",
                              "destination": "Porto", "fact": 0}]}, tool="record_relations"),
    )  # fmt: skip
    key = make_key("acme", "openai-worker")
    headers = auth(key.raw)
    body = {"messages": "I moved to Porto last month", "user_id": "alice"}
    event_id = client.post(
        "/v3/memories/add/", body, content_type="application/json", headers=headers
    ).json()["event_id"]

    def done() -> bool:
        answer = client.get(f"/v1/event/{event_id}/", headers=headers).json()
        return bool(answer["status"] == "SUCCEEDED")

    worker = start_worker(
        ENGRAM_LLM_PROVIDER="openai", ENGRAM_OPENAI_BASE_URL=f"{fake_claude.url}/v1",
        ENGRAM_LLM_MODEL=MODEL, ANTHROPIC_API_KEY="",
    )  # fmt: skip
    try:
        assert wait_for(done), f"event {event_id} was not processed"
    finally:
        stop(worker)
    listed = client.get("/v1/memories/?user_id=alice", headers=headers).json()
    assert [m["memory"] for m in listed] == ["User lives in Porto"]
    assert {r["path"] for r in fake_claude.requests} == {"/v1/chat/completions"}
    assert [r["tool"] for r in fake_claude.requests] == [
        "record_facts", "record_entities", "record_relations"
    ]  # fmt: skip
    event = client.get(f"/v1/event/{event_id}/", headers=headers).json()
    added = [(e["source"], e["relationship"], e["destination"]) for e in event["graph"]["added"]]
    assert added == [("alice", "lives_in", "porto")]
