"""Raw messages join their scope's stored conversation across add requests (issue #14): an
application adding turn by turn gets the keyword context and the conversation grouping one adding
the session at once gets, so both rank alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.test import override_settings

from memory.actions import Message, do_add_messages
from memory.models import Memory
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import auth

SESSION = [
    "Caroline: I went to the LGBTQ support group yesterday, it was powerful.",
    "Melanie: That sounds amazing! What happened there?",
    "Caroline: People shared their transgender stories and I felt accepted.",
    "Melanie: I'm painting a sunrise over the lake these days.",
    "Caroline: Lovely. I'm researching adoption agencies for my future kids.",
    "Melanie: You'd be a great mom. We took the kids camping at the beach.",
]
QUESTIONS = [
    "What did Caroline research?",
    "When did Caroline go to the support group?",
    "What did Melanie paint?",
    "Where did Melanie camp?",
    "What stories were shared?",
]
WHEN = int(datetime(2023, 5, 8, 13, 56, tzinfo=UTC).timestamp())


class ConversationTestCase(BaseTestCase):
    def add(self, texts: list[str], user_id: str, timestamp: int = WHEN, **extra: Any) -> Any:
        body = {
            "messages": [{"role": "user", "content": t} for t in texts],
            "user_id": user_id,
            "infer": False,
            "timestamp": timestamp,
            **extra,
        }
        response = self.client.post(
            "/v3/memories/add/", body, content_type="application/json", headers=auth(self.alice.raw)
        )
        assert response.status_code == 200, response.content
        return response.json()["results"]

    def ranking(self, user_id: str, query: str) -> list[tuple[str, float]]:
        response = self.client.post(
            "/v3/memories/search/",
            {"query": query, "filters": {"user_id": user_id}, "top_k": 6, "threshold": 0},
            content_type="application/json",
            headers=auth(self.alice.raw),
        )
        assert response.status_code == 200, response.content
        return [(r["memory"], round(r["score"], 6)) for r in response.json()["results"]]

    def stored(self, user_id: str) -> dict[str, Memory]:
        with project_context(self.alice.key.project_id):
            rows = Memory.objects.filter(user_id=user_id).order_by("seq")
            return {m.text: m for m in rows}

    def test_turn_by_turn_and_session_adds_rank_the_same(self) -> None:
        self.add(SESSION, "at-once")
        for text in SESSION:
            self.add([text], "by-turn")
        for query in QUESTIONS:
            assert self.ranking("by-turn", query) == self.ranking("at-once", query), query
        at_once, by_turn = self.stored("at-once"), self.stored("by-turn")
        for text in SESSION:
            assert by_turn[text].context_before == at_once[text].context_before
            assert by_turn[text].context_after == at_once[text].context_after
        assert len({m.conversation_id for m in by_turn.values()}) == 1

    def test_a_late_arrival_takes_its_place_between_its_neighbours(self) -> None:
        first, second, third = SESSION[:3]
        self.add([first], "late", timestamp=WHEN)
        self.add([third], "late", timestamp=WHEN + 120)
        assert self.stored("late")[first].context_after == third
        self.add([second], "late", timestamp=WHEN + 60)
        rows = self.stored("late")
        assert rows[first].context_after == second
        assert (rows[second].context_before, rows[second].context_after) == (first, third)
        assert rows[third].context_before == second
        assert len({m.conversation_id for m in rows.values()}) == 1

    def test_a_gap_starts_a_new_conversation(self) -> None:
        self.add(SESSION[:2], "gap", timestamp=WHEN)
        self.add(SESSION[2:4], "gap", timestamp=WHEN + 2 * 3600)
        rows = self.stored("gap")
        assert rows[SESSION[1]].context_after == ""
        assert rows[SESSION[2]].context_before == ""
        assert rows[SESSION[0]].conversation_id == rows[SESSION[1]].conversation_id
        assert rows[SESSION[1]].conversation_id != rows[SESSION[2]].conversation_id

    def test_only_the_same_scopes_raw_messages_are_context(self) -> None:
        self.add([SESSION[0]], "scoped")
        self.add([SESSION[1]], "someone-else")
        self.add([SESSION[2]], "scoped", agent_id="bot")  # another scope: user + agent
        with project_context(self.alice.key.project_id):
            extracted = Memory.objects.create(
                project=self.alice.key.project,
                text="Caroline likes support groups",
                hash="x" * 64,
                embedding=[0.0] * 383 + [1.0],
                user_id="scoped",
                created_at=datetime.fromtimestamp(WHEN, tz=UTC) + timedelta(seconds=1),
            )  # what extraction stores: no role
        self.add([SESSION[3]], "scoped", timestamp=WHEN + 2)
        rows = self.stored("scoped")
        assert rows[SESSION[3]].context_before == SESSION[0]
        assert rows[SESSION[0]].context_after == SESSION[3]
        assert self.stored("someone-else")[SESSION[1]].context_before == ""
        with project_context(self.alice.key.project_id):
            extracted.refresh_from_db()
        assert (extracted.context_before, extracted.context_after) == ("", "")

    @override_settings(ENGRAM_CONVERSATION_GAP_SECONDS=0)
    def test_gap_zero_keeps_context_within_a_request(self) -> None:
        self.add(SESSION[:2], "off")
        self.add(SESSION[2:3], "off")
        rows = self.stored("off")
        assert rows[SESSION[0]].context_after == SESSION[1]
        assert rows[SESSION[1]].context_after == ""
        assert rows[SESSION[2]].context_before == ""
        assert rows[SESSION[1]].conversation_id != rows[SESSION[2]].conversation_id

    def test_the_action_alone_joins_the_conversation_too(self) -> None:
        project = self.alice.key.project
        scope = {"user_id": "direct", "agent_id": None, "app_id": None, "run_id": None}
        moment = datetime.fromtimestamp(WHEN, tz=UTC)
        for text in SESSION[:2]:
            do_add_messages(
                project, messages=[Message("user", text)], scope=scope, actor="test",
                created_at=moment,
            )  # fmt: skip
        rows = self.stored("direct")
        assert rows[SESSION[1]].context_before == SESSION[0]
