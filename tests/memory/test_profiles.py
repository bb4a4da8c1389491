"""User profiles (issue #28): the Platform's /v2/ profile API, generation by the worker (the
graph's deterministic fill, and Claude through the fake Messages API), debounced refreshes,
redaction and erasure, and the official client's six profile methods against a live server."""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import dramatiq
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from memory.actions import profiles as write
from memory.extraction import profiles
from memory.models import IdempotentRequest, ProfileJob, UserProfile
from memory.queries import profiles as read
from tenants.db import project_context
from tenants.models import Membership
from tests.base import BaseTestCase
from tests.factory import add_texts, auth, make_key
from tests.fake_anthropic import FakeClaude, Reply

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "The user's name"},
        "home_city": {"type": "string", "description": "Where the user lives"},
        "work": {"type": "string", "description": "The user's job or employer"},
        "family": {"type": "array", "items": {"type": "string"}, "description": "Family"},
        "likes": {"type": "array", "items": {"type": "string"}, "description": "Hobbies"},
        "shoe_size": {"type": "integer", "description": "Shoe size (EU)"},
    },
}
FACTS = [
    "My name is Alice Smith",
    "I live in Lisbon",
    "I work at Acme",
    "My sister is called Ann",
    "I love hiking",
]
SETTINGS = "/v2/profiles/settings/"
JOBS = "/v2/profiles/jobs/"


def enable(project_id: uuid.UUID, **extra: Any) -> None:
    write.do_update_profile_settings(project_id, enabled=True, schema=SCHEMA, **extra)


def profile_of(project_id: uuid.UUID, user_id: str = "alice") -> UserProfile:
    found = read.user_profile(project_id, user_id)
    assert found is not None
    return found


class ProfileSettingsTestCase(BaseTestCase):
    def test_it_answers_the_defaults(self) -> None:
        assert self.call("get", SETTINGS).json() == {
            "enabled": False,
            "entities": {"user": {"schema": None, "custom_instructions": None}},
            "capabilities": {"full_rebuild": False},
        }

    def test_it_stores_what_is_sent_and_round_trips(self) -> None:
        user = {"schema": SCHEMA, "custom_instructions": "Be brief"}
        answer = self.call("post", SETTINGS, {"enabled": True, "entities": {"user": user}})
        assert answer.status_code == 200, answer.content
        assert answer.json() == self.call("get", SETTINGS).json()
        assert answer.json()["entities"]["user"] == user

    def test_it_changes_only_the_fields_sent_and_null_clears(self) -> None:
        enable(self.alice.key.project_id, custom_instructions="Be brief")
        self.call("post", SETTINGS, {"entities": {"user": {"custom_instructions": None}}})
        user = self.call("get", SETTINGS).json()["entities"]["user"]
        assert user == {"schema": SCHEMA, "custom_instructions": None}

    def test_it_refuses_a_flat_schema_and_changes_nothing(self) -> None:
        answer = self.call("post", SETTINGS, {"enabled": True, "schema": SCHEMA})
        assert answer.status_code == 400
        assert "Unsupported settings" in answer.json()["detail"]
        assert self.call("get", SETTINGS).json()["enabled"] is False

    def test_it_refuses_a_property_without_a_description(self) -> None:
        bad = {"type": "object", "properties": {"name": {"type": "string"}}}
        answer = self.call("post", SETTINGS, {"entities": {"user": {"schema": bad}}})
        assert answer.status_code == 400
        assert "needs a description" in answer.json()["detail"]

    def test_it_refuses_schemas_that_are_not_profile_schemas(self) -> None:
        schemas: list[Any] = [
            [],
            {"type": "array", "properties": {}},
            {"properties": {}},
            {"properties": {"a b": {"description": "x"}}},
            {"properties": {"a": {"description": "x", "type": "date"}}},
            {"properties": {"a": {"description": "x"}}, "oneOf": []},
        ]
        for schema in schemas:
            answer = self.call("post", SETTINGS, {"entities": {"user": {"schema": schema}}})
            assert answer.status_code == 400, (schema, answer.content)
            assert answer.json()["detail"]

    def test_it_keeps_each_projects_settings_apart(self) -> None:
        enable(self.alice.key.project_id)
        assert self.call("get", SETTINGS, who=self.charlie).json()["enabled"] is False

    def test_a_readers_key_reads_the_settings_but_does_not_change_them(self) -> None:
        reader = User.objects.create_user("rita", email="rita@example.com")
        organization = self.alice.key.project.organization
        Membership.objects.create(organization=organization, user=reader, role="reader")
        key = make_key("acme", "main", created_by=reader)
        answer = self.call(
            "post", SETTINGS, {"enabled": True, "entities": {"user": {"schema": SCHEMA}}}, who=key
        )
        assert answer.status_code == 403
        assert "owner or admin" in answer.json()["detail"].lower()
        assert self.call("get", SETTINGS, who=key).json()["enabled"] is False
        Membership.objects.filter(user=reader).update(role="admin")
        answer = self.call(
            "post", SETTINGS, {"enabled": True, "entities": {"user": {"schema": SCHEMA}}}, who=key
        )
        assert answer.status_code == 200, answer.content


class ProfileApiTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project = self.alice.key.project_id
        add_texts(self.alice.key.project, FACTS, user_id="alice")

    def job(self, body: dict[str, Any], key: str | None = "profile-key-1", who: Any = None) -> Any:
        headers = auth((who or self.alice).raw)
        if key:
            headers["Idempotency-Key"] = key
        return self.client.post(JOBS, body, content_type="application/json", headers=headers)

    def test_it_answers_404_for_an_unknown_user(self) -> None:
        assert self.call("get", "/v2/entities/user/nobody/profile/").status_code == 404
        assert (
            self.call("get", "/v2/entities/user/alice/profile/", who=self.charlie).status_code
            == 404
        )

    def test_it_says_not_enabled(self) -> None:
        body = self.call("get", "/v2/entities/user/alice/profile/").json()
        assert body == {
            "profile": {},
            "status": "not_enabled",
            "entity_type": "user",
            "entity_id": "alice",
            "updated_at": None,
            "generation_count": 0,
        }

    def test_it_refuses_an_agent_profile(self) -> None:
        assert self.call("get", "/v2/entities/agent/bot/profile/").status_code == 400

    def test_it_refuses_a_job_while_not_enabled(self) -> None:
        answer = self.job({"operation": "trigger", "entity_type": "user", "entity_id": "alice"})
        assert answer.status_code == 400
        assert "not enabled" in answer.json()["detail"]

    def test_it_queues_a_trigger_and_replays_its_key(self) -> None:
        enable(self.project)
        body = {"operation": "trigger", "entity_type": "user", "entity_id": "alice"}
        first = self.job(body)
        assert first.status_code == 202, first.content
        data = first.json()
        assert data["status"] == "QUEUED" and data["replayed"] is False
        assert data["status_url"] == f"/v2/profiles/jobs/{data['job_id']}/"
        assert (data["operation"], data["entity_count_reserved"], data["event_id"]) == (
            "trigger",
            1,
            None,
        )
        again = self.job(body).json()
        assert (again["job_id"], again["replayed"]) == (data["job_id"], True)
        with project_context(self.project):
            assert ProfileJob.objects.count() == 1

    def test_it_refuses_a_key_reused_with_another_request(self) -> None:
        enable(self.project)
        first = self.job({"operation": "trigger", "entity_type": "user", "entity_id": "alice"})
        assert first.status_code == 202, first.content
        other = self.job({"operation": "trigger", "entity_type": "user", "entity_id": "bob"})
        assert other.status_code == 409, other.content
        assert "Idempotency-Key" in other.json()["detail"]
        assert self.job({"operation": "sample", "entity_type": "user"}).status_code == 409
        replayed = self.job({"entity_id": "alice", "entity_type": "user", "operation": "trigger"})
        assert replayed.status_code == 202 and replayed.has_header("Idempotent-Replayed")
        assert (replayed.json()["job_id"], replayed.json()["replayed"]) == (
            first.json()["job_id"],
            True,
        )
        with project_context(self.project):
            assert list(ProfileJob.objects.values_list("entity_ids", flat=True)) == [["alice"]]

    @override_settings(ENGRAM_IDEMPOTENCY_HOURS=24)
    def test_a_jobs_key_stays_its_own_after_its_record_expires(self) -> None:
        enable(self.project)
        body = {"operation": "trigger", "entity_type": "user", "entity_id": "alice"}
        assert self.job(body).status_code == 202
        with project_context(self.project):
            IdempotentRequest.objects.update(created_at=timezone.now() - timedelta(hours=25))
        assert self.job({**body, "entity_id": "bob"}).status_code == 409
        with project_context(self.project):
            assert ProfileJob.objects.count() == 1

    def test_it_needs_an_idempotency_key_and_a_known_user(self) -> None:
        enable(self.project)
        body = {"operation": "trigger", "entity_type": "user", "entity_id": "alice"}
        assert self.job(body, key=None).status_code == 400
        assert self.job(body, key="short").status_code == 400
        assert self.job({**body, "entity_id": "nobody"}).status_code == 404
        assert self.job({"operation": "trigger"}).status_code == 400
        assert self.job({**body, "entity_type": "agent"}).status_code == 400
        assert self.job({"operation": "rebuild"}).status_code == 400

    def test_it_samples_then_refuses_a_second_sample_too_soon(self) -> None:
        enable(self.project)
        add_texts(self.alice.key.project, ["a", "b"], user_id="bob")  # too few: not sampled
        first = self.job({"operation": "sample", "entity_type": "user", "limit": 5})
        assert first.status_code == 202, first.content
        assert (first.json()["sampled"], first.json()["entity_ids"]) == (1, ["alice"])
        second = self.job({"operation": "sample", "entity_type": "user"}, key="profile-key-2")
        assert second.status_code == 429
        assert second.has_header("Retry-After")
        assert self.job({"operation": "sample", "limit": 11}, key="k" * 9).status_code == 400

    def test_it_shows_a_job_to_its_project_only(self) -> None:
        enable(self.project)
        body = {"operation": "trigger", "entity_type": "user", "entity_id": "alice"}
        job_id = self.job(body).json()["job_id"]
        state = self.call("get", f"{JOBS}{job_id}/").json()["job"]
        assert {k: state[k] for k in ("status", "total", "completed", "succeeded")} == {
            "status": "QUEUED",
            "total": 1,
            "completed": 0,
            "succeeded": 0,
        }
        assert self.call("get", f"{JOBS}{job_id}/", who=self.charlie).status_code == 404
        assert self.call("get", f"{JOBS}{uuid.uuid4()}/").status_code == 404


class DeterministicGenerationTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project = self.alice.key.project_id
        self.memories = add_texts(self.alice.key.project, FACTS, user_id="alice")
        enable(self.project)

    def test_it_fills_the_fields_the_memories_answer(self) -> None:
        assert profiles.generate(self.project, "alice") == "succeeded"
        found = profile_of(self.project)
        assert found.profile == {
            "name": "Alice Smith",
            "home_city": "Lisbon",
            "work": "Acme",
            "family": ["sister: Ann"],
            "likes": ["hiking"],
        }
        assert (found.status, found.generation_count, found.generator) == ("succeeded", 1, "graph")
        assert set(found.memory_ids) == {m.id for m in self.memories}
        body = self.call("get", "/v2/entities/user/alice/profile/").json()
        assert (body["status"], body["profile"]["home_city"]) == ("succeeded", "Lisbon")

    def test_it_reads_the_graph_relations_of_extracted_facts(self) -> None:
        from memory import graph

        graph.upsert_relation(
            self.project,
            "alice",
            "works_at",
            "Globex",
            graph.Scope(user_id="alice"),
            memory_id=self.memories[2].id,
        )
        profiles.generate(self.project, "alice")
        assert profile_of(self.project).profile["work"].lower() == "globex; acme"

    def test_it_says_insufficient_data_below_the_minimum(self) -> None:
        add_texts(self.alice.key.project, ["I live in Porto"], user_id="bob")
        with project_context(self.project):
            write.ensure_profiles(self.project, ["bob"])
        assert profiles.generate(self.project, "bob") == "skipped"
        assert profile_of(self.project, "bob").status == "insufficient_data"
        body = self.call("get", "/v2/entities/user/bob/profile/").json()
        assert (body["status"], body["profile"]) == ("insufficient_data", {})

    def test_it_skips_a_disabled_project(self) -> None:
        write.do_update_profile_settings(self.project, enabled=False)
        assert profiles.generate(self.project, "alice") == "skipped"
        assert profile_of(self.project).profile == {}

    def test_it_bounds_the_input(self) -> None:
        sources = read.profile_sources(self.project, "alice", 2)
        assert len(sources) == 2
        long = [read.ProfileSource(uuid.uuid4(), "x" * 10_000, timezone.now())] * 5
        assert len(profiles.bounded(long)) == 2


class ClaudeGenerationTestCase(BaseTestCase):
    @pytest.fixture(autouse=True)
    def _claude(self, fake_claude: FakeClaude) -> Iterator[None]:
        self.fake = fake_claude
        with override_settings(
            ENGRAM_EXTRACTOR="claude",
            ANTHROPIC_API_KEY="sk-test",
            ANTHROPIC_BASE_URL=fake_claude.url,
            ENGRAM_LLM_MAX_RETRIES=0,
            ENGRAM_LLM_TIMEOUT=5,
        ):
            yield

    def setUp(self) -> None:
        self.project = self.alice.key.project_id
        add_texts(self.alice.key.project, FACTS, user_id="alice")
        enable(self.project, custom_instructions="Write the city in capitals.")

    def test_it_asks_claude_with_the_schema_as_the_tool(self) -> None:
        self.fake.script(
            Reply(
                {"name": "Alice Smith", "home_city": "LISBON", "shoe_size": "big", "secret": "x"},
                usage=(300, 50),
            )
        )
        assert profiles.generate(self.project, "alice") == "succeeded"
        found = profile_of(self.project)
        # A value that does not fit its field, or a field not in the schema, is dropped.
        assert found.profile == {"name": "Alice Smith", "home_city": "LISBON"}
        assert (found.generator, found.usage["calls"], found.usage["input_tokens"]) == (
            "claude",
            1,
            300,
        )
        [request] = self.fake.requests
        body = request["body"]
        assert body["tool_choice"]["name"] == "record_profile"
        assert body["tools"][0]["input_schema"]["properties"] == SCHEMA["properties"]
        assert "Write the city in capitals." in str(body["system"])
        assert "I live in Lisbon" in body["messages"][0]["content"]

    def test_a_failure_is_recorded_and_not_retried(self) -> None:
        self.fake.script(Reply(status=500), Reply(status=500))
        assert profiles.generate(self.project, "alice") == "failed"
        found = profile_of(self.project)
        assert (found.status, found.profile) == ("failed", {})
        assert "InternalServerError" in found.error
        later = timezone.now() + timedelta(hours=1)
        assert read.due_profiles(self.project, later, profiles.debounce()) == []


class DebounceTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project = self.alice.key.project_id
        enable(self.project)
        add_texts(self.alice.key.project, FACTS, user_id="alice")
        profiles.generate(self.project, "alice")

    def test_a_change_makes_the_profile_due_after_the_delay_only(self) -> None:
        delay = profiles.debounce()
        now = timezone.now()
        assert read.due_profiles(self.project, now + 2 * delay, delay) == []  # up to date
        add_texts(self.alice.key.project, ["I love chess"], user_id="alice")
        row = profile_of(self.project)
        assert read.due_profiles(self.project, timezone.now(), delay) == []  # too soon
        assert read.due_profiles(self.project, timezone.now() + delay, delay) == [row.pk]

    def test_it_refreshes_at_most_once_per_window(self) -> None:
        delay, now = profiles.debounce(), timezone.now()
        # Changed long ago since its last generation, but attempted just now.
        with project_context(self.project):
            UserProfile.objects.update(
                generated_through=now - 3 * delay, changed_at=now - 2 * delay, attempted_at=now
            )
        assert read.due_profiles(self.project, now, delay) == []
        assert len(read.due_profiles(self.project, now + delay, delay)) == 1

    def test_the_refresher_sends_each_due_profile_once(self) -> None:
        add_texts(self.alice.key.project, ["I love chess"], user_id="alice")
        long_ago = timezone.now() - timedelta(hours=1)
        with project_context(self.project):
            UserProfile.objects.update(
                changed_at=long_ago,
                attempted_at=long_ago,
                generated_through=long_ago - timedelta(hours=1),
            )
        assert profiles.refresh_due() == 1
        assert profiles.refresh_due() == 0  # queued already
        with project_context(self.project):
            row = UserProfile.objects.get()
        assert row.queued_at is not None
        profiles.refresh_profile(row.pk, str(self.project))
        found = profile_of(self.project)
        assert (found.queued_at, found.generation_count) == (None, 2)
        assert sorted(found.profile["likes"]) == ["chess", "hiking"]

    def test_the_command_sends_the_due_refreshes(self) -> None:
        long_ago = timezone.now() - timedelta(hours=1)
        with project_context(self.project):
            UserProfile.objects.update(
                generated_through=long_ago - timedelta(hours=1),
                changed_at=long_ago,
                attempted_at=long_ago,
            )
        out = io.StringIO()
        call_command("sweep_events", stdout=out)
        assert out.getvalue() == "sent 1 profile refreshes\n"

    def test_a_redaction_empties_the_profile_at_once(self) -> None:
        memory_id = profile_of(self.project).memory_ids[1]
        answer = self.call("post", f"/v1/memories/{memory_id}/redact/", {"reason": "GDPR"})
        assert answer.status_code == 200, answer.content
        found = profile_of(self.project)
        assert (found.profile, found.memory_ids, found.status) == ({}, [], "pending")
        assert "Lisbon" not in str(self.call("get", "/v2/entities/user/alice/profile/").json())

    def test_a_build_that_overlaps_a_redaction_writes_nothing_back(self) -> None:
        """The memory a running build read is redacted before the build records: the build's
        result (with that memory's words) must not bring them back."""
        memory_id = profile_of(self.project).memory_ids[0]
        real_build = profiles.build

        def build_then_redact(*args: Any) -> Any:
            result = real_build(*args)
            answer = self.call("post", f"/v1/memories/{memory_id}/redact/", {"reason": "GDPR"})
            assert answer.status_code == 200, answer.content
            return result

        add_texts(self.alice.key.project, ["I love chess"], user_id="alice")
        with mock.patch.object(profiles, "build", build_then_redact):
            assert profiles.generate(self.project, "alice") == "succeeded"
        found = profile_of(self.project)
        assert (found.profile, found.memory_ids, found.generation_count) == ({}, [], 1)
        assert found.attempted_at is not None and found.queued_at is None

    def test_enabled_without_a_schema_is_not_sent_round_after_round(self) -> None:
        write.do_update_profile_settings(self.project, schema=None)
        long_ago = timezone.now() - timedelta(hours=1)
        with project_context(self.project):
            UserProfile.objects.update(
                changed_at=long_ago, attempted_at=long_ago, generated_through=None
            )
        assert profiles.refresh_due() == 1
        with project_context(self.project):
            row = UserProfile.objects.get()
        profiles.refresh_profile(row.pk, str(self.project))  # nothing to build: released
        later = timezone.now() + 2 * profiles.debounce()
        assert read.due_profiles(self.project, later, profiles.debounce()) == []

    def test_an_erasure_deletes_the_profile_and_the_id_from_jobs(self) -> None:
        with project_context(self.project):
            write.do_create_profile_job(self.project, "sample", ["alice", "bob"], "sample-key-1")
        call_command(
            "purge_user",
            "--org",
            "acme",
            "--project",
            "main",
            "--user-id",
            "alice",
            stdout=io.StringIO(),
        )
        assert read.user_profile(self.project, "alice") is None
        with project_context(self.project):
            assert ProfileJob.objects.get().entity_ids == ["bob"]
        assert self.call("get", "/v2/entities/user/alice/profile/").status_code == 404


class DashboardsTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project = self.alice.key.project_id
        enable(self.project)
        add_texts(self.alice.key.project, FACTS, user_id="alice")
        profiles.generate(self.project, "alice")

    def test_the_operator_sees_a_users_profile(self) -> None:
        from django.contrib.auth import get_user_model

        from tenants.models import Membership

        olive = get_user_model().objects.create_user("olive", password="pw")
        Membership.objects.create(
            user=olive,
            organization=self.alice.key.project.organization,
            role=Membership.Role.READER,
        )
        self.client.force_login(olive)
        page = self.client.get(f"/dashboard/p/{self.project}/memories/", {"user_id": "alice"})
        assert page.status_code == 200
        assert b"Profile" in page.content and b"<bdi>home_city</bdi>" in page.content
        assert b"Lisbon" in page.content and b"without a model" in page.content
        other = self.client.get(f"/dashboard/p/{self.project}/memories/", {"agent_id": "x"})
        assert b"profile-heading" not in other.content  # an agent's page: no profile

    def test_the_end_user_sees_and_downloads_their_profile(self) -> None:
        import json

        from tenants import links

        token, _ = links.mint(self.alice.key, "alice", 3600)
        home = self.client.get(reverse("web:enduser_home", kwargs={"token": token}))
        assert home.status_code == 200, home.status_code
        assert b"Your profile" in home.content and b"Acme" in home.content
        url = reverse("web:enduser_download", kwargs={"token": token})
        download = json.loads(self.client.get(url).content)
        assert download["profile"]["status"] == "succeeded"
        assert download["profile"]["fields"]["home_city"] == "Lisbon"


# -- the real worker and the official client ----------------------------------------------------


def wait_for(done: Callable[[], bool], timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def worker(committed_db: None) -> Iterator[None]:
    """A real dramatiq worker on the profiles queue, in this process."""
    running = dramatiq.Worker(
        dramatiq.get_broker(), queues={"profiles"}, worker_threads=1, worker_timeout=100
    )
    running.start()
    yield
    running.stop()
    with connection.cursor() as cursor:  # the queue is not flushed between tests
        cursor.execute("DELETE FROM dramatiq.queue WHERE queue_name LIKE 'profiles%'")


@pytest.fixture
def client(live_api: str, worker: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    monkeypatch.setenv("MEM0_TELEMETRY", "False")
    monkeypatch.setenv("MEM0_DIR", str(tmp_path))
    from mem0 import MemoryClient

    key = make_key("acme", "profiles")
    add_texts(key.key.project, FACTS, user_id="alice")
    made = MemoryClient(host=live_api, api_key=key.raw)
    yield made
    made.client.close()


def test_the_official_client_uses_profiles_end_to_end(client: Any) -> None:
    assert client.get_profile("alice")["status"] == "not_enabled"
    settings = client.update_profile_settings(
        enabled=True, schema=SCHEMA, custom_instructions="Short values"
    )
    assert settings == client.get_profile_settings()
    assert settings["entities"]["user"]["schema"] == SCHEMA

    created = client.generate_profile("alice")
    assert (created["operation"], created["replayed"]) == ("trigger", False)
    assert wait_for(
        lambda: client.get_profile_job(created["status_url"])["job"]["status"] == "SUCCEEDED"
    )
    assert client.get_profile_job(created["job_id"])["job"]["succeeded"] == 1
    profile = client.get_profile("alice")
    assert profile["status"] == "succeeded" and profile["generation_count"] == 1
    assert profile["profile"]["home_city"] == "Lisbon"

    sampled = client.sample_profiles(limit=2)
    assert sampled["entity_ids"] == ["alice"]
    assert wait_for(lambda: client.get_profile_job(sampled["status_url"])["job"]["completed"] == 1)
    assert client.get_profile("alice")["generation_count"] == 2

    from mem0.exceptions import MemoryNotFoundError, ValidationError

    with pytest.raises(MemoryNotFoundError):
        client.get_profile("nobody")
    with pytest.raises(ValidationError):
        client.update_profile_settings(schema={"properties": {"age": {"type": "integer"}}})
