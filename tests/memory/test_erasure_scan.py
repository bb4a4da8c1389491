"""The planted-string scan (issue #10): erase, redact or purge, then read every table.

A distinctive string is planted for user A in every store the API and the worker reach:
memories stored verbatim (infer=false) and their neighbours' keyword context, a memory
extracted by the pipeline (Claude faked at the HTTP boundary) with its graph entities and
relation, history (both memories updated), the add request's messages, results and graph
summary, the scope's running summary (refreshed by the worker), feedback, an export, the
user's profile (built by Claude from their memories), and the access log (list requests naming
the user). The same string is planted the same way for user B of the same project. Then every
table of the database, the dramatiq schema and the AGE graph's label tables included, is read
as the owner role in every tenant context (tests.memory.test_erasure.scan) for the string:

- after A's erasure (purge_user): none of A's rows, B's rows unchanged, and A's id nowhere;
- after the redaction of A's extracted memory: none of its text anywhere but in B's rows,
  and A's other memories untouched;
- after purge_expired erases A's extracted memory once deleted long enough: the same.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from memory.actions import profiles as profile_actions
from memory.extraction import profiles
from memory.extraction.llm.claude import ClaudeExtractor
from memory.extraction.pipeline import process_event, refresh_summary
from memory.models import Memory
from tenants.actions import NewApiKey
from tenants.db import project_context
from tests.factory import auth, make_key
from tests.fake_anthropic import FakeClaude, Reply
from tests.memory.test_erasure import Row, call, scan

pytestmark = pytest.mark.usefixtures("committed_db")

MARK = f"zq-planted-{uuid.uuid4().hex[:10]}"
RAW = f"{MARK}-raw"  # in the memories stored verbatim
FACT = f"{MARK}-fact"  # in the extracted memory, its event, summary, feedback and graph
USER_A = f"ann-{uuid.uuid4().hex[:8]}"
USER_B = f"bob-{uuid.uuid4().hex[:8]}"
PROFILE_SCHEMA = {"properties": {"locker": {"type": "string", "description": "Their locker"}}}


def respond(body: dict[str, Any]) -> dict[str, Any]:
    """Claude, for every tool the worker asks for (one fact, its entities, one relation)."""
    fact = f"User's {FACT} locker is number 12"
    answers: dict[str, dict[str, Any]] = {
        "record_facts": {"facts": [{"text": fact, "confidence": 0.9, "positions": [0]}]},
        "record_decisions": {"decisions": [{"fact": 0, "event": "ADD", "text": fact}]},
        "record_entities": {
            "entities": [
                {"name": "User", "type": "person"},
                {"name": f"{FACT} locker", "type": "product"},
            ],
        },
        "record_relations": {
            "relations": [
                {
                    "source": "User",
                    "relationship": "owns",
                    "destination": f"{FACT} locker",
                    "fact": 0,
                }
            ],
        },
        "record_contradictions": {"contradicted": []},
        "record_summary": {"summary": f"The user has a {FACT} locker"},
        "record_profile": {"locker": f"The {FACT} locker, number 14"},
    }
    return answers.get(body["tool_choice"]["name"], {})


@dataclass
class Planted:
    raw: str  # the memory stored verbatim (updated once)
    fact: str  # the extracted memory (updated once)
    event: str


@dataclass
class World:
    key: NewApiKey
    users: dict[str, Planted] = field(default_factory=dict)

    @property
    def project(self) -> uuid.UUID:
        return self.key.key.project_id


def plant(client: Any, world: World, claude: ClaudeExtractor, user: str) -> Planted:
    key = world.key
    raw = call(client, key, "post", "/v1/memories/", {
        "messages": [{"role": "user", "content": f"The {RAW} key is in the drawer"},
                     {"role": "user", "content": "Tea is nice"}],
        "user_id": user, "infer": False})["results"][0]["id"]  # fmt: skip
    call(client, key, "put", f"/v1/memories/{raw}/", {"text": f"The {RAW} key is in the safe"})
    # An add with an Idempotency-Key: its answer (the memory) is kept for replays.
    replayable = client.post("/v3/memories/add/", {
        "messages": f"The {RAW} spare key is with a neighbour", "user_id": user, "infer": False,
    }, content_type="application/json",
        headers={**auth(key.raw), "Idempotency-Key": f"key-{user}"})  # fmt: skip
    assert replayable.status_code == 200, replayable.content
    queued = call(client, key, "post", "/v3/memories/add/", {
        "messages": [{"role": "user", "content": f"My {FACT} locker is number 12"}],
        "user_id": user})  # fmt: skip
    event = uuid.UUID(queued["event_id"])
    process_event(event, world.project, claude)
    with override_settings(ENGRAM_SUMMARY_EVERY=1):  # a summary from this one request
        refresh_summary(event, world.project, claude)
    with project_context(world.project):
        fact = str(Memory.objects.get(source_event_id=event).pk)
    call(client, key, "put", f"/v1/memories/{fact}/", {"text": f"User's {FACT} locker is 14"})
    call(client, key, "post", "/v1/feedback/", {
        "memory_id": fact, "feedback": "POSITIVE",
        "feedback_reason": f"{user} confirms the {FACT} locker"})  # fmt: skip
    call(client, key, "post", "/v1/exports/", {"filters": {"user_id": user}})
    call(client, key, "get", f"/v1/memories/?user_id={user}")
    # The user's profile, built by Claude from their memories (the locker among them).
    with override_settings(
        ENGRAM_EXTRACTOR="claude",
        ANTHROPIC_API_KEY="sk-test",
        ANTHROPIC_BASE_URL=str(claude.client.base_url),
    ):
        assert profiles.generate(world.project, user) == "succeeded"
    return Planted(raw=raw, fact=fact, event=str(event))


@pytest.fixture
def world(client: Any, fake_claude: FakeClaude) -> Iterator[World]:
    fake_claude.graph_defaults = False
    fake_claude.script(Reply(respond=respond, repeat=True))
    claude = ClaudeExtractor(
        api_key="sk-test", base_url=fake_claude.url, model="claude-haiku-5-5",
        max_tokens=512, timeout=5, max_retries=0,
    )  # fmt: skip
    made = World(key=make_key("acme", "main"))
    profile_actions.do_update_profile_settings(made.project, enabled=True, schema=PROFILE_SCHEMA)
    for user in (USER_A, USER_B):
        made.users[user] = plant(client, made, claude, user)
    yield made
    with connection.cursor() as cursor:  # the queue is not flushed between tests
        cursor.execute(
            "DELETE FROM dramatiq.queue WHERE message::text LIKE %s", [f"%{made.project}%"]
        )


def of_b(rows: set[Row]) -> set[Row]:
    return {row for row in rows if USER_B in row[2]}


def tables(rows: set[Row]) -> set[str]:
    return {table for table, _, _ in rows}


def test_planting_reaches_every_store(world: World) -> None:
    planted = tables(scan(MARK)) & tables(scan(USER_A))
    assert planted >= {
        "memory_memory", "memory_memoryhistory", "memory_memoryevent", "memory_scopesummary",
        "memory_feedback", "memory_memoryexport", "memory_memoryentity", "Entity",
        "memory_idempotentrequest", "memory_userprofile",
    }, planted  # fmt: skip
    # Edges name their ends by id, and the log holds ids and paths, never texts.
    assert {"RELATES", "audit_accesslog"} <= tables(scan(USER_A)) - tables(scan(MARK))
    assert tables(scan(MARK) - of_b(scan(MARK))) == tables(of_b(scan(MARK)))


def test_erasing_a_user_leaves_the_string_only_in_the_other_users_rows(world: World) -> None:
    before = scan(MARK)
    call_command(
        "purge_user", "--org", "acme", "--project", "main", "--user-id", USER_A,
        stdout=io.StringIO(),
    )  # fmt: skip
    assert scan(MARK) == of_b(before), sorted(scan(MARK) - of_b(before))[:3]
    assert scan(USER_A) == set()


def test_a_redacted_memorys_text_is_found_nowhere_else(world: World, client: Any) -> None:
    before, raw_before = scan(FACT), scan(RAW)
    mine = world.users[USER_A]
    call(client, world.key, "post", f"/v1/memories/{mine.fact}/redact/", {"reason": "GDPR"})
    after = scan(FACT)
    assert after == of_b(before), sorted(after - of_b(before))[:3]
    # A's other memory, untouched (A's export changed: it held the redacted one too).
    raw_after = scan(RAW)
    assert tables(raw_after) == tables(raw_before)
    assert {r for r in raw_after if r[0] != "memory_memoryexport"} == {
        r for r in raw_before if r[0] != "memory_memoryexport"
    }
    with project_context(world.project):
        assert Memory.objects.get(pk=mine.fact).state == "redacted"


def test_purge_expired_erases_a_deleted_memory_everywhere(world: World, client: Any) -> None:
    before = scan(FACT)
    mine = world.users[USER_A]
    call(client, world.key, "delete", f"/v1/memories/{mine.fact}/")
    with project_context(world.project):
        long_ago = timezone.now() - timedelta(days=31)
        Memory.objects.filter(pk=mine.fact).update(updated_at=long_ago)
    call_command("purge_expired", stdout=io.StringIO(), stderr=io.StringIO())
    after = scan(FACT)
    assert after == of_b(before), sorted(after - of_b(before))[:3]
    with project_context(world.project):
        assert not Memory.objects.filter(pk=mine.fact).exists()
