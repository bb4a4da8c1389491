"""One add naming several entities: each filter finds the memories whose ids it names.

Mem0's cookbook "Partition Memories by Entity" adds with user_id, agent_id, app_id and run_id,
then searches the user's scope and the agent's scope each alone; Mem0's filters constrain only
the ids they name (docs/platform/features/entity-scoped-memory.mdx: "Unmentioned entities are
not constrained"). Agent frameworks (agent-framework-mem0) add with a user and an agent and
search by each.
"""

from __future__ import annotations

from typing import Any

from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.pipeline import process_event
from memory.models import Memory
from tenants.actions import NewApiKey
from tenants.db import project_context
from tests.base import BaseTestCase

CAM = {
    "user_id": "traveler_cam",
    "agent_id": "travel_planner",
    "run_id": "tokyo-2025-weekend",
    "app_id": "concierge_app",
}
SAID = "I'm Cam. Keep in mind I avoid shellfish and prefer boutique hotels."
MESSAGES = [
    {"role": "user", "content": SAID},
    {"role": "assistant", "content": "Noted! I'll use those preferences in future itineraries."},
]
# The cookbook's two searches, then each id alone.
USER_SCOPE: dict[str, Any] = {"AND": [{f: CAM[f]} for f in ("user_id", "app_id", "run_id")]}
AGENT_SCOPE: dict[str, Any] = {"AND": [{f: CAM[f]} for f in ("agent_id", "app_id")]}
EACH_ALONE: list[dict[str, Any]] = [USER_SCOPE, AGENT_SCOPE, *({f: v} for f, v in CAM.items())]


def texts(body: Any) -> list[str]:
    """The memories' texts of a read's answer (a list, or an object holding `results`)."""
    rows = body["results"] if isinstance(body, dict) else body
    return [row["memory"] for row in rows]


class ScopesTestCase(BaseTestCase):
    def add(self, **body: Any) -> Any:
        response = self.call("post", "/v3/memories/add/", {"messages": MESSAGES, **CAM, **body})
        assert response.status_code == 200, response.content
        return response.json()

    def searched(self, filters: dict[str, Any], who: NewApiKey | None = None) -> list[str]:
        # The cookbook's question; threshold 0: every memory the filters keep is a result.
        body = {"query": "Any dietary restrictions?", "filters": filters, "threshold": 0.0}
        response = self.call("post", "/v3/memories/search/", body, who=who)
        assert response.status_code == 200, (filters, response.content)
        return texts(response.json())

    def listed(self, filters: dict[str, Any], who: NewApiKey | None = None) -> list[str]:
        response = self.call("post", "/v3/memories/", {"filters": filters}, who=who)
        assert response.status_code == 200, (filters, response.content)
        return texts(response.json())

    def test_a_direct_add_stores_every_id_on_each_memory(self) -> None:
        results = self.add(infer=False)["results"]
        assert [r["event"] for r in results] == ["ADD", "ADD"]
        with project_context(self.alice.key.project_id):
            stored = list(Memory.objects.values("user_id", "agent_id", "app_id", "run_id"))
        assert stored == [CAM, CAM]

    def test_each_id_alone_finds_what_a_direct_add_stored(self) -> None:
        self.add(infer=False)
        for filters in EACH_ALONE:
            assert SAID in self.searched(filters), filters
            assert SAID in self.listed(filters), filters

    def test_each_id_alone_finds_what_an_extracted_add_stored(self) -> None:
        event_id = self.add()["event_id"]
        process_event(event_id, self.alice.key.project_id, OfflineExtractor())
        extracted = set(self.listed({"user_id": CAM["user_id"]}))
        assert extracted  # the offline extractor keeps Cam's statements
        for filters in EACH_ALONE:
            assert set(self.searched(filters)) == set(self.listed(filters)) == extracted, filters

    def test_the_older_paths_find_it_by_each_id_alone_too(self) -> None:
        self.call("post", "/v1/memories/", {"messages": MESSAGES, **CAM, "infer": False})
        for field, value in CAM.items():
            body = {"query": "Any dietary restrictions?", field: value, "threshold": 0.0}
            for path in ("/v2/memories/search/", "/v1/memories/search/"):
                assert SAID in texts(self.call("post", path, body).json()), (path, field)
            assert SAID in texts(self.call("get", f"/v1/memories/?{field}={value}").json())

    def test_an_id_named_with_another_value_finds_nothing(self) -> None:
        self.add(infer=False)
        for filters in (
            {"agent_id": "chef_recommender"},
            {"user_id": CAM["user_id"], "agent_id": "chef_recommender"},
            {"AND": [{"agent_id": CAM["agent_id"]}, {"run_id": "menu-planning-2025-04"}]},
        ):
            assert self.searched(filters) == self.listed(filters) == [], filters

    def test_the_other_ids_required_unset_is_an_explicit_filter(self) -> None:
        self.add(infer=False)
        alone = "Cam collects stamps"
        only_user = {"messages": alone, "user_id": CAM["user_id"], "infer": False}
        self.call("post", "/v3/memories/add/", only_user)
        unset = {"OR": [{"agent_id": "*"}, {"app_id": "*"}, {"run_id": "*"}]}
        strict = {"user_id": CAM["user_id"], "NOT": unset}
        assert self.listed(strict) == [alone]
        assert set(self.listed({"user_id": CAM["user_id"]})) > {alone, SAID}
        no_agent = {"user_id": CAM["user_id"], "NOT": {"agent_id": "*"}}
        assert self.listed(no_agent) == [alone]

    def test_another_project_finds_none_of_it(self) -> None:
        self.add(infer=False)
        for filters in EACH_ALONE:
            assert self.searched(filters, who=self.charlie) == [], filters
            assert self.listed(filters, who=self.charlie) == [], filters
