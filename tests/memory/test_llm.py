"""Claude (through the real SDK, against a local fake Messages API) and the offline extractor."""

from __future__ import annotations

import time
import uuid
from datetime import date
from typing import Any

import anthropic
import httpx
import pytest

from memory.extraction.llm.claude import ClaudeExtractor
from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.llm.openai_compat import OpenAIExtractor
from memory.extraction.llm.provider import get_extractor
from memory.extraction.llm.schemas import DECIDE_TOKENS_BASE, DECIDE_TOKENS_PER_FACT
from memory.extraction.llm.types import Context, Existing, Fact, ModelOutputError, Turn
from memory.extraction.llm.waits import retry_after_seconds
from tests.fake_anthropic import FakeClaude, Reply

MODEL = "claude-haiku-5-5"
TEA = Existing(uuid.uuid4(), "User lives in NYC", 0.8)
SINGLE = Existing(uuid.uuid4(), "User is single", 0.7)


def claude(fake: FakeClaude, *, retries: int = 0, timeout: float = 5) -> ClaudeExtractor:
    return ClaudeExtractor(
        api_key="sk-test", base_url=fake.url, model=MODEL, max_tokens=512,
        timeout=timeout, max_retries=retries,
    )  # fmt: skip


def context(*texts: str) -> Context:
    turns = [Turn(i, "user", t) for i, t in enumerate(texts)]
    return Context(new_messages=turns, observed_on=date(2026, 11, 22))


def test_it_extracts_facts_through_a_forced_tool_call(fake_claude: FakeClaude) -> None:
    fake_claude.script(Reply({"facts": [
        {"text": "User moved to SF on 2026-11-15", "category": "home", "confidence": 0.9,
         "positions": [0, 7]},
    ]}))  # fmt: skip
    facts, usage = claude(fake_claude).extract(context("I moved from NYC to SF last week"))
    assert facts == [Fact("User moved to SF on 2026-11-15", "home", 0.9, (0,))]  # 7 not shown
    assert (usage.calls, usage.input_tokens, usage.output_tokens) == (1, 120, 40)
    request = fake_claude.requests[0]
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    body = request["body"]
    assert (body["model"], body["tool_choice"]) == (MODEL, {"type": "tool", "name": "record_facts"})
    assert "2026-11-22" in body["messages"][0]["content"]
    assert "[0] user: I moved from NYC to SF last week" in body["messages"][0]["content"]


def test_it_maps_small_ids_back_to_memories(fake_claude: FakeClaude) -> None:
    facts = [Fact("User lives in SF"), Fact("User is married")]
    fake_claude.script(Reply({"decisions": [
        {"fact": 0, "event": "UPDATE", "id": "0", "text": "User lives in SF (moved from NYC)"},
        {"fact": 1, "event": "DELETE", "id": "1"},
        {"fact": 1, "event": "ADD", "text": "User is married"},
    ]}))  # fmt: skip
    result, _ = claude(fake_claude).decide(facts, [[TEA], [SINGLE]])
    assert [(d.event, d.fact, d.memory_id, d.text) for d in result.decisions] == [
        ("UPDATE", 0, TEA.id, "User lives in SF (moved from NYC)"),
        ("DELETE", 1, SINGLE.id, "User is married"),
        ("ADD", 1, None, "User is married"),
    ]
    prompt = fake_claude.requests[0]["body"]["messages"][0]["content"]
    assert "existing id 0: User lives in NYC" in prompt
    assert str(TEA.id) not in prompt  # the model never sees real ids


def test_it_rejects_an_invented_id_and_keeps_the_rest(fake_claude: FakeClaude) -> None:
    fake_claude.script(Reply({"decisions": [
        {"fact": 0, "event": "UPDATE", "id": "7", "text": "x"},
        {"fact": 0, "event": "NONE", "id": str(TEA.id)},
        {"fact": 5, "event": "ADD", "text": "y"},
        {"fact": 0, "event": "NONE", "id": "0"},
    ]}))  # fmt: skip
    result, _ = claude(fake_claude).decide([Fact("User lives in NYC")], [[TEA]])
    assert [(d.event, d.memory_id) for d in result.decisions] == [("NONE", TEA.id)]
    assert len(result.rejected) == 3


def test_it_validates_item_by_item(fake_claude: FakeClaude) -> None:
    fake_claude.script(Reply({"facts": [
        {"text": "", "confidence": 7}, {"text": "User likes tea"}, "not an object",
    ]}))  # fmt: skip
    facts, usage = claude(fake_claude).extract(context("I like tea"))
    assert facts == [Fact("User likes tea", None, 1.0, ())]  # defaults for what is missing
    assert [n.split(" (")[0] for n in usage.notes] == [
        "record_facts item 0 dropped", "record_facts item 2 dropped"
    ]  # fmt: skip
    # Lower-case events and integer ids are read; an unknown event is dropped, with a note.
    fake_claude.script(Reply({"decisions": [
        {"fact": 0, "event": "update", "id": 0, "text": "User lives in SF"},
        {"fact": 0, "event": "MERGE"},
    ]}))  # fmt: skip
    result, _ = claude(fake_claude).decide([Fact("User lives in SF")], [[TEA]])
    assert [(d.event, d.memory_id) for d in result.decisions] == [("UPDATE", TEA.id)]
    assert result.rejected[0].startswith("record_decisions item 1 dropped (event:")


def test_a_malformed_reply_is_asked_for_once_more_then_refused(fake_claude: FakeClaude) -> None:
    fake_claude.script(Reply({"facts": "tea"}), Reply({"no": "facts"}))
    with pytest.raises(ModelOutputError, match="record_facts input is malformed") as raised:
        claude(fake_claude).extract(context("I like tea"))
    assert raised.value.usage.calls == 2  # what it cost is known all the same


def test_a_reply_without_the_tool_call_is_asked_for_once_more(fake_claude: FakeClaude) -> None:
    fake_claude.script(
        Reply(stop_reason="end_turn"), Reply({"facts": [{"text": "User likes tea"}]})
    )
    facts, usage = claude(fake_claude).extract(context("I like tea"))
    assert ([f.text for f in facts], usage.calls) == (["User likes tea"], 2)
    fake_claude.script(Reply(stop_reason="end_turn"), Reply(stop_reason="end_turn"))
    with pytest.raises(ModelOutputError, match="did not call record_facts"):
        claude(fake_claude).extract(context("I like tea"))


def test_a_refusal_fails_at_once(fake_claude: FakeClaude) -> None:
    fake_claude.script(Reply(stop_reason="refusal"), Reply({"facts": []}))
    with pytest.raises(ModelOutputError, match="refused the record_facts call"):
        claude(fake_claude).extract(context("I like tea"))
    assert len(fake_claude.requests) == 1


def test_a_truncated_reply_is_asked_for_again_with_the_full_budget(
    fake_claude: FakeClaude,
) -> None:
    # The decide call asks for what its schema needs; cut off, it asks for the cap.
    fake_claude.script(
        Reply({"decisions": [{"fact": 0}]}, stop_reason="max_tokens"),
        Reply({"decisions": [{"fact": 0, "event": "NONE", "id": "0"}]}),
    )
    result, _ = claude(fake_claude).decide([Fact("User likes tea")], [[TEA]])
    assert [d.event for d in result.decisions] == ["NONE"]
    budgets = [r["body"]["max_tokens"] for r in fake_claude.requests]
    assert budgets == [DECIDE_TOKENS_BASE + DECIDE_TOKENS_PER_FACT, 512]  # 512: the cap
    # A reply cut off at the cap is not asked for again.
    fake_claude.script(Reply({"facts": []}, stop_reason="max_tokens"))
    with pytest.raises(ModelOutputError, match="cut off at max_tokens"):
        claude(fake_claude).extract(context("I like tea"))
    assert len(fake_claude.requests) == 3


def test_usage_counts_the_prompt_cache_and_thinking_is_off(fake_claude: FakeClaude) -> None:
    fake_claude.script(Reply({"facts": []}, usage=(30, 5), cache=(2000, 0)))
    _, usage = claude(fake_claude).extract(context("I like tea"))
    assert usage.counts() == {
        "calls": 1, "input_tokens": 30, "output_tokens": 5,
        "cache_creation_input_tokens": 2000, "cache_read_input_tokens": 0,
    }  # fmt: skip
    assert fake_claude.requests[0]["body"]["thinking"] == {"type": "disabled"}


def test_it_retries_a_rate_limit_then_succeeds(fake_claude: FakeClaude) -> None:
    fake_claude.script(
        Reply(status=429, error_type="rate_limit_error"),
        Reply({"facts": [{"text": "User likes tea", "confidence": 1, "positions": [0]}]}),
    )
    facts, _ = claude(fake_claude, retries=2).extract(context("I like tea"))
    assert [f.text for f in facts] == ["User likes tea"]
    assert len(fake_claude.requests) == 2


def test_a_long_retry_after_is_left_to_the_events_own_retry(fake_claude: FakeClaude) -> None:
    # The SDK would sleep as long as the header says; the worker's thread must not.
    fake_claude.script(
        Reply(status=429, error_type="rate_limit_error", headers={"retry-after": "3600"}),
        Reply({"facts": []}),
    )
    started = time.monotonic()
    with pytest.raises(anthropic.RateLimitError):
        claude(fake_claude, retries=2).extract(context("I like tea"))
    assert len(fake_claude.requests) == 1
    assert time.monotonic() - started < 60  # not an hour; the exact time is not the point


def test_a_short_retry_after_is_honoured_within_the_attempt(fake_claude: FakeClaude) -> None:
    fake_claude.script(
        Reply(status=429, error_type="rate_limit_error", headers={"retry-after-ms": "50"}),
        Reply({"facts": []}),
    )
    facts, _ = claude(fake_claude, retries=2).extract(context("I like tea"))
    assert facts == []
    assert len(fake_claude.requests) == 2


def test_retry_after_is_read_like_the_sdk_reads_it() -> None:
    assert retry_after_seconds(httpx.Headers({"retry-after": "3600"})) == 3600.0
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    past = retry_after_seconds(httpx.Headers({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}))
    assert past is not None
    assert past < 0
    assert retry_after_seconds(httpx.Headers({})) is None
    assert retry_after_seconds(httpx.Headers({"retry-after": "soon"})) is None


def test_it_gives_up_after_timeouts(fake_claude: FakeClaude) -> None:
    fake_claude.script(Reply({"facts": []}, delay=1.5), Reply({"facts": []}, delay=1.5))
    with pytest.raises(anthropic.APITimeoutError):
        claude(fake_claude, retries=1, timeout=0.5).extract(context("I like tea"))
    assert len(fake_claude.requests) == 2


def test_it_extracts_offline_first_person_statements_only() -> None:
    turns = [
        Turn(0, "user", "Hi there! I love dark roast coffee. What is the weather like?"),
        Turn(1, "assistant", "I am an assistant and I like helping."),
        Turn(2, "user", "My sister lives in Lisbon. Thanks! The sky is blue today."),
        Turn(3, "user", "I love dark roast coffee"),
    ]
    facts, usage = OfflineExtractor().extract(Context(turns, date(2026, 11, 22)))
    assert [(f.text, f.positions) for f in facts] == [
        ("I love dark roast coffee.", (0,)),
        ("My sister lives in Lisbon.", (2,)),
    ]
    assert usage.calls == 0


def test_offline_it_strips_greetings_and_keeps_short_statements() -> None:
    turns = [
        Turn(0, "user", "Hello, my name is Ann. I'm vegan. I see. Thanks! I live in Oslo"),
        Turn(1, "user", "OK so I work at Acme. Hi there! Me too. Bye!"),
    ]
    facts, _ = OfflineExtractor().extract(Context(turns, date(2026, 11, 22)))
    assert [f.text for f in facts] == [
        "My name is Ann.", "I'm vegan.", "I live in Oslo", "I work at Acme."
    ]  # fmt: skip


def test_it_decides_offline_by_similarity_and_never_deletes() -> None:
    facts = [Fact("I live in NYC"), Fact("I got married")]
    near = Existing(uuid.uuid4(), "I live in NYC.", 0.97)
    result, _ = OfflineExtractor().decide(facts, [[near], [SINGLE]])
    assert [(d.event, d.memory_id) for d in result.decisions] == [
        ("NONE", near.id),
        ("ADD", None),
    ]


def test_one_client_per_process_and_configuration(settings: Any) -> None:
    settings.ENGRAM_EXTRACTOR = "claude"
    settings.ANTHROPIC_API_KEY, settings.ANTHROPIC_BASE_URL = "sk-test", "http://127.0.0.1:9"
    first, again = get_extractor(), get_extractor()
    assert isinstance(first, ClaudeExtractor) and isinstance(again, ClaudeExtractor)
    # One SDK client (and connection pool) for every job.
    assert first is again and first.client is again.client
    settings.ENGRAM_LLM_MODEL = "claude-other"
    other = get_extractor()
    assert (
        isinstance(other, ClaudeExtractor) and other is not first and other.model == "claude-other"
    )
    settings.ENGRAM_EXTRACTOR = "openai"
    settings.ENGRAM_OPENAI_BASE_URL, settings.ENGRAM_LLM_MODEL = "http://127.0.0.1:9/v1", "qwen3"
    local = get_extractor()
    assert isinstance(local, OpenAIExtractor) and local is get_extractor()
    assert (local.model, str(local.client.base_url)) == ("qwen3", "http://127.0.0.1:9/v1/")
    assert (local.mode, local.attachments) == ("tools", frozenset())
    settings.ENGRAM_EXTRACTOR = "offline"
    assert isinstance(get_extractor(), OfflineExtractor)
