"""Random sequences of writes across two projects and several scopes, against a plain model.

hypothesis drives add / update / delete / delete-all / batch delete / cross-project attempts
through the API; after every step, list and search must show exactly what the model says each
scope holds: never another project's or scope's memory, never a deleted one, never losing an
active one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.test import Client, override_settings
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
    run_state_machine_as_test,
)

from tests.base import BaseTestCase
from tests.factory import auth

WORDS = ["tea", "coffee", "Lisbon", "hiking", "chess", "a beagle", "sushi", "guitar"]
USERS = ["u1", "u2"]
AGENTS = [None, "bot"]
ANY_AGENT = "(any agent)"  # a read that does not name agent_id: with an agent or without


@dataclass
class Stored:
    project: str  # "alice" or "charlie": whose key
    user: str
    agent: str | None
    text: str
    id: str = ""


@dataclass
class Model:
    active: dict[str, Stored] = field(default_factory=dict)  # memory id -> what it holds

    def scope(self, project: str, user: str, agent: str | None) -> dict[str, str]:
        return {
            m.id: m.text
            for m in self.active.values()
            if (m.project, m.user) == (project, user) and agent in (ANY_AGENT, m.agent)
        }


class MemoryMachine(RuleBasedStateMachine):
    """One example: a fresh run id keeps its memories apart from every other example's."""

    keys: dict[str, str]
    memories = Bundle("memories")

    def __init__(self) -> None:
        super().__init__()
        self.client = Client()
        self.model = Model()
        self.run = uuid.uuid4().hex[:8]

    def call(self, who: str, method: str, path: str, body: Any = None) -> Any:
        kwargs: dict[str, Any] = {"headers": auth(self.keys[who])}
        if body is not None:
            kwargs.update(data=body, content_type="application/json")
        return getattr(self.client, method)(path, **kwargs)

    def scope_body(self, user: str, agent: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"user_id": user, "run_id": self.run}
        if agent:
            body["agent_id"] = agent
        return body

    @rule(
        target=memories,
        who=st.sampled_from(["alice", "charlie"]),
        user=st.sampled_from(USERS),
        agent=st.sampled_from(AGENTS),
        words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=2),
    )
    def add(self, who: str, user: str, agent: str | None, words: list[str]) -> Stored:
        text = f"I like {' and '.join(words)}"
        body = {"messages": text, "infer": False, **self.scope_body(user, agent)}
        response = self.call(who, "post", "/v3/memories/add/", body)
        assert response.status_code == 200, response.content
        result = response.json()["results"][0]
        existing = self.model.scope(who, user, agent)
        if text in existing.values():
            assert result["event"] == "NONE"  # the exact duplicate is not stored twice
            assert existing[result["id"]] == text
        else:
            assert result["event"] == "ADD"
        stored = Stored(who, user, agent, text, result["id"])
        self.model.active[stored.id] = stored
        return stored

    @rule(memory=memories, words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=2))
    def update(self, memory: Stored, words: list[str]) -> None:
        text = f"I now like {' and '.join(words)}"
        response = self.call(memory.project, "put", f"/v1/memories/{memory.id}/", {"text": text})
        if memory.id in self.model.active:
            assert response.status_code == 200, response.content
            self.model.active[memory.id].text = text
        else:
            assert response.status_code == 404

    @rule(memory=consumes(memories))
    def delete(self, memory: Stored) -> None:
        response = self.call(memory.project, "delete", f"/v1/memories/{memory.id}/")
        assert response.status_code == (200 if memory.id in self.model.active else 404)
        self.model.active.pop(memory.id, None)

    @rule(who=st.sampled_from(["alice", "charlie"]), user=st.sampled_from(USERS))
    def delete_all(self, who: str, user: str) -> None:
        # Every memory of the user in this run, whatever the agent.
        response = self.call(who, "delete", f"/v1/memories/?user_id={user}&run_id={self.run}")
        assert response.status_code == 200
        gone = [k for k, m in self.model.active.items() if (m.project, m.user) == (who, user)]
        assert response.json()["deleted"] == len(gone)
        for key in gone:
            del self.model.active[key]

    @rule(memory=memories)
    def the_other_project_cannot_touch_it(self, memory: Stored) -> None:
        other = "charlie" if memory.project == "alice" else "alice"
        for method, body in (("get", None), ("put", {"text": "hijacked"}), ("delete", None)):
            response = self.call(other, method, f"/v1/memories/{memory.id}/", body)
            assert response.status_code == 404

    @rule(first=memories, second=memories)
    def batch_delete(self, first: Stored, second: Stored) -> None:
        if first.project != second.project or first.id == second.id:
            return
        ids = [first.id, second.id]
        response = self.call(first.project, "delete", "/v1/batch/",
                             {"memories": [{"memory_id": i} for i in ids]})  # fmt: skip
        if all(i in self.model.active for i in ids):
            assert response.status_code == 200, response.content
            for i in ids:
                del self.model.active[i]
        else:
            assert response.status_code == 400  # all or nothing: a gone id refuses the batch

    @invariant()
    def every_scope_lists_and_finds_exactly_what_it_holds(self) -> None:
        for who in ("alice", "charlie"):
            for user in USERS:
                for agent in (*AGENTS, ANY_AGENT):
                    expected = self.model.scope(who, user, agent)
                    filters: dict[str, Any] = {"user_id": user, "run_id": self.run}
                    if agent is None:  # the memories without an agent, by the strict form
                        filters["NOT"] = {"agent_id": "*"}
                    elif agent != ANY_AGENT:
                        filters["agent_id"] = agent
                    listed = self.call(who, "post", "/v3/memories/", {"filters": filters})
                    assert listed.status_code == 200, listed.content
                    got = {m["id"]: m["memory"] for m in listed.json()["results"]}
                    assert got == expected, (who, user, agent)
                    if expected:
                        found = self.call(who, "post", "/v3/memories/search/",
                                          {"query": "what do I like", "filters": filters,
                                           "threshold": 0})  # fmt: skip
                        assert found.status_code == 200
                        ids = {m["id"] for m in found.json()["results"]}
                        assert ids == set(expected), (who, user, agent)


@override_settings(
    # Hundreds of requests a second from one key: the throttle is not what is tested here.
    REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"api_key": None}}
)
class StatefulTestCase(BaseTestCase):
    def test_random_write_sequences_keep_every_scope_exact(self) -> None:
        MemoryMachine.keys = {"alice": self.alice.raw, "charlie": self.charlie.raw}
        run_state_machine_as_test(
            MemoryMachine,
            settings=hypothesis_settings(
                max_examples=20,
                stateful_step_count=12,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
