from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase as HypothesisTestCase

from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.pipeline import process_event
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

    def test_it_answers_the_legacy_v1_path_as_output_format_asks(self) -> None:
        # mem0ai 1.x sends async_mode true (without it, v1 waits for the worker: test_sync_add).
        queued = {"messages": "hello there", "user_id": "alice", "infer": True, "async_mode": True}
        assert isinstance(self.add(queued, path="/v1/memories/").json(), list)
        body = self.add({**queued, "output_format": "v1.1", "version": "v2"}, "/v1/memories/")
        assert (body.json()["results"][0]["status"], body.json()["relations"]) == ("PENDING", [])
        stored = self.add(
            {"messages": "hi", "user_id": "alice", "output_format": "v1.0"}, "/v1/memories/"
        )
        assert [r["memory"] for r in stored.json()] == ["hi"]

    def test_it_accepts_scope_ids_in_metadata_that_repeat_the_requests_own(self) -> None:
        # PraisonAI sends metadata={"user_id": U} beside user_id=U; the id is a column, so the
        # repeat is dropped from the stored metadata.
        metadata = {"user_id": " alice ", "agent_id": "bot", "topic": "tea"}
        response = self.add(
            {
                "messages": "x",
                "user_id": "alice",
                "filters": {"agent_id": "bot"},
                "metadata": metadata,
            }
        )
        assert response.status_code == 200
        assert [(m.user_id, m.agent_id, m.metadata) for m in self.stored()] == [
            ("alice", "bot", {"topic": "tea"})
        ]

    def test_it_refuses_scope_ids_in_metadata_that_differ_from_the_requests_own(self) -> None:
        details = []
        for metadata in ({"user_id": "bob"}, {"agent_id": "bot"}, {"user_id": ["alice"]}):
            response = self.add({"messages": "x", "user_id": "alice", "metadata": metadata})
            assert response.status_code == 400, metadata
            details.append(response.json()["detail"])
        assert all("is a scope id and cannot be set through metadata" in d for d in details)
        assert "'bob' differs from the request's user_id 'alice'" in details[0]
        assert "pass it as agent_id" in details[1]
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
            {"messages": "I like tea", "user_id": "alice", "infer": True, "async_mode": True},
            path="/v1/memories/",
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
            # Python takes offsets up to 23:59, PostgreSQL up to 15:59:59: the worker failed.
            {"observation_datetime": "2024-05-13T08:30:00+16:00"},
        ):  # fmt: skip
            response = self.queued(**extra)
            assert response.status_code == 400, extra
            assert next(iter(extra)) in str(response.json()["detail"])
        with project_context(self.alice.key.project_id):
            assert not MemoryEvent.objects.exists()

    def test_a_moment_outside_years_1_to_9999_is_refused_on_arrival(self) -> None:
        """Once answered 200 PENDING, then failed in the worker (OverflowError): issue #24."""
        for extra in (
            {"observation_datetime": "0001-01-01T00:00:00+14:00"},  # year 0 in UTC
            {"observation_datetime": "9999-12-31T23:00:00-12:00"},  # year 10000 in UTC
            # The worker reads the local date in `timezone` too.
            {"observation_datetime": "9999-12-31T23:00:00+00:00", "timezone": "Asia/Tokyo"},
            {"observation_datetime": "0001-01-01T00:30:00", "timezone": "Asia/Tokyo"},
            {"observation_date": "0001-01-01", "timezone": "Asia/Tokyo"},  # LMT +09:18:59
            {"timestamp": 253402300799, "timezone": "Pacific/Kiritimati"},
        ):
            response = self.queued(**extra)
            assert response.status_code == 400, (extra, response.content)
            detail = response.json()["detail"]
            assert detail.startswith(next(iter(extra))) and "1-9999" in detail, detail
        with project_context(self.alice.key.project_id):
            assert not MemoryEvent.objects.exists()

    def test_messages_stored_at_the_last_second_a_timestamp_names_join_a_conversation(
        self,
    ) -> None:
        """infer=false at 9999-12-31T23:59:59Z: the conversation window after it overflowed."""
        for text in ("I like tea", "I like coffee"):
            response = self.add({"messages": text, "user_id": "alice", "timestamp": 253402300799})
            assert response.status_code == 200, response.content
        first, second = self.stored()
        assert (second.context_before, second.conversation_id) == (
            "I like tea",
            first.conversation_id,
        )

    def test_the_last_moments_inside_years_1_to_9999_are_extracted(self) -> None:
        for extra in (
            {"observation_datetime": "0001-01-01T00:00:00-01:00"},
            {"observation_datetime": "9999-12-31T23:59:59+00:00"},
            {"observation_datetime": "0001-01-01T12:00:00+10:00", "timezone": "Asia/Tokyo"},
            {"observation_date": "9999-12-31", "timezone": "Pacific/Pago_Pago"},
            {"observation_date": "0001-01-01", "timezone": "America/New_York"},
            {"timestamp": 253402300799, "timezone": "Etc/GMT+12"},
        ):
            assert processed(self, self.queued(**extra)) == "SUCCEEDED", extra


def processed(case: BaseTestCase, response: Any) -> str:
    """Run the worker (offline extraction) on the request's event; its final status."""
    assert response.status_code == 200, response.content
    project = case.alice.key.project_id
    process_event(response.json()["event_id"], project, OfflineExtractor())
    with project_context(project):
        return MemoryEvent.objects.get(pk=response.json()["event_id"]).status


ZONES = ["UTC", "Pacific/Kiritimati", "Etc/GMT-14", "Etc/GMT+12", "Asia/Tokyo", "Pacific/Niue"]
# Local times (no offset) of the first and last two days of the calendar.
DAYS = st.dates(max_value=date(1, 1, 2)) | st.dates(min_value=date(9999, 12, 30))
EDGES = st.builds(datetime.combine, DAYS, st.times())


class ObservationEdgesTestCase(HypothesisTestCase, BaseTestCase):
    """Any observation time near the ends of years 1-9999, in any offset and time zone: refused
    on arrival, or extracted by the worker; never a 200 the worker then cannot process."""

    @settings(max_examples=60, deadline=None)
    @given(
        moment=EDGES,
        offset=st.none() | st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1),
        zone=st.none() | st.sampled_from(ZONES),
        kind=st.sampled_from(["observation_datetime", "observation_date", "timestamp"]),
    )
    def test_it_is_refused_or_extracted(
        self, moment: datetime, offset: int | None, zone: str | None, kind: str
    ) -> None:
        body: dict[str, Any] = {"messages": "I ran a marathon", "user_id": "alice"}
        if kind == "observation_date":
            body[kind] = moment.date().isoformat()
        elif kind == "timestamp":
            seconds = int(moment.replace(tzinfo=UTC).timestamp())
            body[kind] = min(max(seconds, 0), 253402300799)
        elif offset is None:
            body[kind] = moment.isoformat()
        else:
            sign, minutes = "+" if offset >= 0 else "-", abs(offset)
            body[kind] = f"{moment.isoformat()}{sign}{minutes // 60:02}:{minutes % 60:02}"
        if zone is not None:
            body["timezone"] = zone
        response = self.call("post", "/v3/memories/add/", body)
        if response.status_code == 400:
            assert response.json()["detail"].startswith(kind), response.json()
        else:
            assert processed(self, response) == "SUCCEEDED", body
