"""Loud, never silent (issue #30, item 2): unusable model output is asked for once more, then
the event fails with the reason; first-person statements from which extraction found no fact
leave a warning on the event, in the API and on the operator's events page. Claude is faked at
the HTTP boundary (tests/fake_anthropic.py), the pipeline is the real one."""

from __future__ import annotations

from datetime import date
from typing import Any, ClassVar

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.test import override_settings
from django.urls import reverse
from django.utils.html import escape

from memory.extraction.llm.claude import ClaudeExtractor
from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.llm.types import Context, Turn
from memory.extraction.pipeline import (
    NOTHING_EXTRACTED,
    NOTHING_KEPT,
    NOTHING_KEPT_OFFLINE,
    process_event,
    states_first_person,
)
from memory.models import Memory, MemoryEvent
from tenants.db import project_context
from tenants.models import Membership
from tests.base import BaseTestCase
from tests.factory import add_texts
from tests.fake_anthropic import FakeClaude, Reply

SCOPE = {"user_id": "alice", "agent_id": None, "app_id": None, "run_id": None}
BERLIN = "I moved to Berlin and I work at Siemens"
NOTHING = Reply({"facts": []})
DAY = date(2026, 11, 27)
COUNTED = "1 add request in the last 30 days extracted nothing from first-person messages"


def facts(*texts: str) -> Reply:
    return Reply({"facts": [{"text": t, "confidence": 0.9, "positions": [0]} for t in texts]})


class LoudTestCase(BaseTestCase):
    olivia: ClassVar[User]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        cls.olivia = get_user_model().objects.create_user("olivia", password="pw")
        Membership.objects.create(
            user=cls.olivia,
            organization=cls.alice.key.project.organization,
            role=Membership.Role.OWNER,
        )

    @pytest.fixture(autouse=True)
    def _claude(self, fake_claude: FakeClaude) -> None:
        self.fake = fake_claude
        self.claude = ClaudeExtractor(
            api_key="sk-test", base_url=fake_claude.url, model="claude-haiku-5-5",
            max_tokens=512, timeout=5, max_retries=0,
        )  # fmt: skip

    def setUp(self) -> None:
        self.project = self.alice.key.project

    def run_event(self, *messages: str | dict[str, str], extractor: Any = None) -> MemoryEvent:
        said = [m if isinstance(m, dict) else {"role": "user", "content": m} for m in messages]
        payload = {"messages": said, "scope": SCOPE}
        with project_context(self.project.pk):
            event = MemoryEvent.objects.create(project=self.project, payload=payload, **SCOPE)
        process_event(event.id, self.project.pk, extractor or self.claude)
        with project_context(self.project.pk):
            return MemoryEvent.objects.get(pk=event.pk)

    def memories(self) -> list[str]:
        with project_context(self.project.pk):
            return list(Memory.objects.active().values_list("text", flat=True))

    def tools(self) -> list[str]:
        return [r["body"]["tool_choice"]["name"] for r in self.fake.requests]

    def events_page(self, params: Any = None) -> str:
        self.client.force_login(self.olivia)
        url = reverse("web:events", kwargs={"project_id": self.project.pk})
        response = self.client.get(url, params)
        assert response.status_code == 200
        return str(response.content.decode())


class WarningTestCase(LoudTestCase):
    def test_first_person_statements_without_a_fact_are_warned_everywhere(self) -> None:
        self.fake.script(NOTHING)
        done = self.run_event(BERLIN)
        assert (done.status, done.warning, done.results) == ("SUCCEEDED", NOTHING_EXTRACTED, [])
        assert self.memories() == []
        # The API: the event's detail and the list, filtered by the warning.
        body = self.call("get", f"/v1/event/{done.id}/").json()
        assert (body["status"], body["warning"]) == ("SUCCEEDED", NOTHING_EXTRACTED)
        warned = self.call("get", "/v1/events/?warning=TRUE").json()["results"]
        assert [e["id"] for e in warned] == [str(done.id)]
        assert self.call("get", "/v1/events/?warning=false").json()["results"] == []
        refused = self.call("get", "/v1/events/?warning=yes")
        assert refused.status_code == 400 and "must be true or false" in refused.content.decode()
        # The operator's events page counts it and marks its row; its own page says why.
        page = self.events_page()
        assert COUNTED in page
        assert page.count("Nothing extracted</span>") == 1
        self.client.force_login(self.olivia)
        detail = self.client.get(
            reverse("web:event", kwargs={"project_id": self.project.pk, "event_id": done.id})
        )
        assert escape(NOTHING_EXTRACTED) in detail.content.decode()

    def test_a_stated_fact_clears_the_warning_and_only_warned_rows_are_marked(self) -> None:
        self.fake.script(NOTHING, facts("User moved to Berlin"))
        warned = self.run_event(BERLIN)
        stored = self.run_event("I moved to Berlin")
        assert (warned.warning, stored.warning) == (NOTHING_EXTRACTED, "")
        assert self.memories() == ["User moved to Berlin"]
        assert self.call("get", f"/v1/event/{stored.id}/").json()["warning"] is None
        only = self.events_page({"warning": "on"})
        assert COUNTED in only and str(warned.id) in only and str(stored.id) not in only

    def test_a_question_or_a_greeting_is_not_a_statement_but_kept_nothing(self) -> None:
        self.fake.script(NOTHING, NOTHING, NOTHING)
        for said in ("what's the weather?", "hi", "Can you tell me where I left my keys?"):
            done = self.run_event(said)
            assert (done.status, done.warning) == ("SUCCEEDED", NOTHING_KEPT), said
        page = self.events_page()
        # Not counted as a model that may not be working, but each row says it kept nothing.
        assert "extracted nothing from first-person messages" not in page
        assert page.count("Nothing kept</span>") == 3

    def test_the_assistants_first_person_and_an_agents_scope_are_not_the_users(self) -> None:
        self.fake.script(NOTHING)
        done = self.run_event({"role": "assistant", "content": "I am happy to help with that."})
        assert done.warning == NOTHING_KEPT
        turns = [Turn(0, "user", BERLIN)]
        assert states_first_person(Context(turns, DAY))
        assert not states_first_person(Context(turns, DAY, about_agent=True))

    def test_all_duplicates_are_not_nothing(self) -> None:
        with project_context(self.project.pk):
            add_texts(self.project, ["User moved to Berlin"], user_id="alice")
        self.fake.script(facts("User moved to Berlin"))
        done = self.run_event("I moved to Berlin")
        assert (done.status, done.warning) == ("SUCCEEDED", "")
        assert done.results[0]["event"] == "NONE"

    def test_the_offline_extractor_does_not_trip_it(self) -> None:
        offline = OfflineExtractor()
        for said in (BERLIN, "My sister's name is Ann.", "I'm allergic to peanuts"):
            done = self.run_event(said, extractor=offline)
            assert (done.status, done.warning) == ("SUCCEEDED", ""), said
        assert self.fake.requests == []

    def test_the_offline_extractor_keeps_what_frameworks_store_and_says_what_it_cannot(
        self,
    ) -> None:
        offline = OfflineExtractor()
        # AutoGen's own example: a statement about the user in the third person.
        done = self.run_event("User likes the color blue.", extractor=offline)
        assert (done.warning, [r["event"] for r in done.results]) == ("", ["ADD"])
        assert "User likes the color blue." in self.memories()
        # CrewAI's task outputs come as assistant messages in the user's scope; a greeting says
        # nothing: both keep nothing, and the event says what the offline extractor keeps.
        crew = {"role": "assistant", "content": "The report is written: it has three sections."}
        for said in (crew, "hi"):
            done = self.run_event(said, extractor=offline)
            assert (done.status, done.warning, done.results) == (
                "SUCCEEDED",
                NOTHING_KEPT_OFFLINE,
                [],
            ), said
        # An agent's own scope never warns: its adds are the agent's own notes.
        with project_context(self.project.pk):
            agent = {"user_id": None, "agent_id": "bot", "app_id": None, "run_id": None}
            event = MemoryEvent.objects.create(
                project=self.project,
                payload={"messages": [{"role": "user", "content": "hi"}], "scope": agent},
                **agent,
            )
        process_event(event.id, self.project.pk, offline)
        with project_context(self.project.pk):
            assert MemoryEvent.objects.get(pk=event.pk).warning == ""


@override_settings(ENGRAM_GRAPH_EXTRACTION=False)  # the extraction calls alone are counted
class ReaskTestCase(LoudTestCase):
    def test_an_unusable_reply_is_asked_for_once_more_with_a_note(self) -> None:
        self.fake.script(Reply({"facts": "Berlin"}), facts("User moved to Berlin"))
        done = self.run_event(BERLIN)
        assert (done.status, done.usage["calls"]) == ("SUCCEEDED", 2)
        assert (done.usage["input_tokens"], done.usage["output_tokens"]) == (240, 80)
        assert self.memories() == ["User moved to Berlin"]
        assert self.tools() == ["record_facts", "record_facts"]
        first, again = (r["body"] for r in self.fake.requests)
        # The same request, with a note of what was wrong appended to it.
        assert (again["system"], again["tools"]) == (first["system"], first["tools"])
        asked, reasked = first["messages"][0]["content"], again["messages"][0]["content"]
        assert reasked.startswith(asked + "\n\n")
        assert "Your previous reply could not be used: record_facts input is malformed" in reasked
        assert done.warning == ""

    def test_a_reply_without_the_tool_call_is_asked_for_once_more(self) -> None:
        self.fake.script(Reply(stop_reason="end_turn"), facts("User works at Siemens"))
        done = self.run_event(BERLIN)
        assert (done.status, done.usage["calls"]) == ("SUCCEEDED", 2)
        reasked = self.fake.requests[1]["body"]["messages"][0]["content"]
        assert "could not be used: the model did not call record_facts" in reasked

    def test_two_unusable_replies_fail_the_event_with_the_reason(self) -> None:
        self.fake.script(Reply({"facts": "Berlin"}), Reply({"no": "facts"}))
        done = self.run_event(BERLIN)
        assert (done.status, done.usage["calls"]) == ("FAILED", 2)
        assert "record_facts input is malformed" in done.error
        assert done.error.endswith("(asked twice)")
        assert self.memories() == []
        assert len(self.fake.requests) == 2  # asked once more, no more
        body = self.call("get", f"/v1/event/{done.id}/").json()
        assert (body["status"], body["error"], body["warning"]) == ("FAILED", done.error, None)
