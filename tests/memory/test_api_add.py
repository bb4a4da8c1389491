from __future__ import annotations

from typing import Any

from memory.models import Memory, MemoryEvent, MemoryHistory
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import auth


class AddTestCase(BaseTestCase):
    def add(self, body: dict[str, Any], path: str = "/v3/memories/add/") -> Any:
        return self.client.post(
            path,
            {"infer": False, **body},
            content_type="application/json",
            headers=auth(self.alice.raw),
        )

    def stored(self) -> list[Memory]:
        with project_context(self.alice.key.project_id):
            return list(Memory.objects.order_by("created_at", "source_positions"))

    def test_it_stores_each_non_system_message(self) -> None:
        messages = [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "I love dark roast coffee"},
            {"role": "assistant", "content": "Noted!", "name": "barista"},
        ]
        response = self.add({"messages": messages, "user_id": "alice"})
        assert response.status_code == 200
        body = response.json()
        assert (body["status"], [r["event"] for r in body["results"]]) == (
            "SUCCEEDED",
            ["ADD", "ADD"],
        )
        assert [r["data"]["memory"] for r in body["results"]] == [
            "I love dark roast coffee",
            "Noted!",
        ]
        stored = {m.text: m for m in self.stored()}
        assert stored["Noted!"].actor_id == "barista"
        assert stored["I love dark roast coffee"].source_positions == [1]
        assert str(stored["Noted!"].source_event_id) == body["event_id"]

    def test_it_accepts_a_string_and_scope_inside_filters(self) -> None:
        response = self.add({"messages": "plain text memory", "filters": {"user_id": "alice"}})
        assert response.status_code == 200
        assert [(m.text, m.user_id) for m in self.stored()] == [("plain text memory", "alice")]

    def test_it_skips_exact_duplicates_in_the_same_scope(self) -> None:
        self.add({"messages": "I like tea", "user_id": "alice"})
        again = self.add(
            {"messages": [{"role": "user", "content": "I like tea"}] * 2, "user_id": "alice"}
        )
        assert [r["event"] for r in again.json()["results"]] == ["NONE", "NONE"]
        self.add({"messages": "I like tea", "user_id": "bob"})
        assert sorted(str(m.user_id) for m in self.stored()) == ["alice", "bob"]

    def test_it_writes_an_add_history_row_per_memory(self) -> None:
        body = self.add({"messages": "I like tea", "user_id": "alice"}).json()
        with project_context(self.alice.key.project_id):
            row = MemoryHistory.objects.get(memory_id=body["results"][0]["id"])
        assert (row.event, row.new_memory, row.actor) == (
            "ADD",
            "I like tea",
            f"api:{self.alice.key.prefix}",
        )
        assert str(row.event_id) == body["event_id"]

    def test_it_stores_metadata_timestamp_and_expiration(self) -> None:
        self.add(
            {
                "messages": "Trip to Rome",
                "user_id": "alice",
                "metadata": {"topic": "travel"},
                "timestamp": 1700000000,  # 2023-11-14 22:13:20 UTC, a Tuesday
                "expiration_date": "2030-01-01",
            }
        )
        memory = self.stored()[0]
        assert memory.metadata == {"topic": "travel"}
        assert str(memory.expiration_date) == "2030-01-01"
        assert memory.structured_attributes == {
            "day": 14, "month": 11, "year": 2023, "hour": 22, "minute": 13,
            "day_of_week": "tuesday", "is_weekend": False, "quarter": 4, "week_of_year": 46,
        }  # fmt: skip

    def test_it_keeps_neighbouring_messages_as_keyword_context(self) -> None:
        messages = [{"role": "user", "content": text} for text in ("a", "b", "c")]
        self.add({"messages": messages, "user_id": "alice"})
        middle = next(m for m in self.stored() if m.text == "b")
        assert (middle.context_before, middle.context_after) == ("a", "c")

    def test_it_answers_the_legacy_v1_path_with_relations(self) -> None:
        response = self.add({"messages": "hello there", "user_id": "alice"}, path="/v1/memories/")
        assert response.status_code == 200
        assert response.json()["relations"] == []

    def test_it_refuses_scope_ids_in_metadata(self) -> None:
        response = self.add({"messages": "x", "user_id": "alice", "metadata": {"user_id": "bob"}})
        assert response.status_code == 400
        assert "'user_id' is a scope id" in response.json()["detail"]
        assert self.stored() == []

    def test_it_refuses_bad_input_and_stores_nothing(self) -> None:
        cases: list[dict[str, Any]] = [
            {"messages": [], "user_id": "alice"},
            {"messages": [{"role": "user", "content": "   "}], "user_id": "alice"},
            {"messages": [{"role": "robot", "content": "hi"}], "user_id": "alice"},
            {"messages": [{"content": "no role"}], "user_id": "alice"},
            {"messages": "no scope"},
            {"messages": "x", "user_id": {"nested": 1}},
            {"messages": "x", "filters": {"user_id": "*"}},
            {"messages": "x", "user_id": "alice", "memory_type": "episodic"},
            {"messages": "x", "user_id": "alice", "timestamp": "yesterday"},
            {"messages": "x" * 20_001, "user_id": "alice"},
        ]
        for body in cases:
            response = self.add(body)
            assert response.status_code == 400, body
            assert response.json()["detail"], body
        assert self.stored() == []

    def test_it_queues_inference_for_a_worker(self) -> None:
        with self.captureOnCommitCallbacks(execute=False) as callbacks:
            response = self.add({"messages": "I like tea", "user_id": "alice", "infer": True})
        body = response.json()
        assert (response.status_code, body["status"]) == (200, "PENDING")
        with project_context(self.alice.key.project_id):
            event = MemoryEvent.objects.get(pk=body["event_id"])
        assert event.status == "PENDING"
        assert event.payload["messages"] == [{"role": "user", "content": "I like tea", "name": ""}]
        assert event.payload["scope"]["user_id"] == "alice"
        assert len(callbacks) == 1  # the message is sent only once the request commits
        assert self.stored() == []  # nothing extracted on the request path

    def test_it_answers_the_legacy_v1_queue_shape(self) -> None:
        response = self.add(
            {"messages": "I like tea", "user_id": "alice", "infer": True}, path="/v1/memories/"
        )
        [body] = response.json()
        assert body["status"] == "PENDING"

    def test_it_queues_procedural_memory_for_an_agent_only(self) -> None:
        body = {"messages": "step 1", "infer": True, "memory_type": "procedural_memory"}
        refused = self.add({**body, "user_id": "alice"})
        assert refused.status_code == 400
        assert "agent_id" in refused.json()["detail"]
        with self.captureOnCommitCallbacks(execute=False):
            queued = self.add({**body, "agent_id": "bot"})
        with project_context(self.alice.key.project_id):
            event = MemoryEvent.objects.get(pk=queued.json()["event_id"])
        assert event.payload["memory_type"] == "procedural_memory"

    def test_it_creates_no_event_for_bad_input(self) -> None:
        cases: list[dict[str, Any]] = [
            {"messages": [{"role": "robot", "content": "hi"}], "user_id": "alice"},
            {"messages": [{"role": "user", "content": ""}], "user_id": "alice"},
            {"messages": {"text": "not a message"}, "user_id": "alice"},
            {"messages": "x", "user_id": "alice", "memory_type": "episodic"},
            {"messages": "x" * 20_001, "user_id": "alice"},
        ]
        for body in cases:
            response = self.add({**body, "infer": True})
            assert response.status_code == 400, body
        with project_context(self.alice.key.project_id):
            assert not MemoryEvent.objects.exists()

    def test_it_refuses_too_many_messages(self) -> None:
        messages = [{"role": "user", "content": f"m{i}"} for i in range(501)]
        response = self.add({"messages": messages, "user_id": "alice"})
        assert response.status_code == 400
        assert "limit is 500" in response.json()["detail"]


class ObservationTimeTestCase(AddTestCase):
    """Mem0 v3's observation_date / observation_datetime / timezone, kept for extraction."""

    def queued(self, **extra: Any) -> Any:
        return self.add({"messages": "I ran yesterday", "user_id": "alice", "infer": True, **extra})

    def payload(self, response: Any) -> dict[str, Any]:
        assert response.status_code == 200, response.content
        with project_context(self.alice.key.project_id):
            return dict(MemoryEvent.objects.get(pk=response.json()["event_id"]).payload)

    def test_a_date_or_a_time_is_read_in_the_time_zone(self) -> None:
        paris = self.payload(self.queued(observation_date="2024-05-13", timezone="Europe/Paris"))
        assert (paris["observed_at"], paris["timezone"]) == (
            "2024-05-13T00:00:00+02:00", "Europe/Paris"
        )  # fmt: skip
        naive = self.payload(self.queued(observation_datetime="2024-05-13T08:30:00"))
        assert naive["observed_at"] == "2024-05-13T08:30:00+00:00"  # UTC without a zone
        given = self.payload(self.queued(observation_datetime="2024-05-13T08:30:00-07:00",
                                         timezone="Asia/Tokyo"))  # fmt: skip
        assert given["observed_at"] == "2024-05-13T08:30:00-07:00"  # its own offset wins
        assert self.payload(self.queued())["observed_at"] is None

    def test_bad_values_are_refused(self) -> None:
        for extra in (
            {"timezone": "Mars/Olympus_Mons"}, {"timezone": "../etc/passwd"},
            {"observation_datetime": "yesterday"}, {"observation_date": "2024-13-01"},
        ):  # fmt: skip
            response = self.queued(**extra)
            assert response.status_code == 400, extra
            assert next(iter(extra)) in str(response.json()["detail"])
        with project_context(self.alice.key.project_id):
            assert not MemoryEvent.objects.exists()
