"""The official JavaScript client (mem0ai 3.x, through Node) against a live engram server.

tests/clients/js/client.mjs calls every memory method of the client's `MemoryClient` in turn
and prints what each returned, or what it raised; this test runs it once and checks every step
against the answer and against the database. `make node-client` installs Node and the pinned
package (scripts/install-node-client.sh); the test fails rather than skips without them.

Inference: the script adds one conversation with inference on while no worker runs, so the
client sees it PENDING; then a real worker (offline extractor) processes it, and the erasures
the two user deletions queued, and the test checks what the worker wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

from audit.models import AccessLog, ErasureRequest
from memory.models import Feedback, Memory, MemoryEvent, MemoryExport, MemoryHistory
from tenants.db import project_context
from tests.factory import add_texts, make_key
from tests.memory.test_events import start_worker, stop, wait_for
from tests.memory.test_mem0_client import supersede

ROOT = Path(__file__).resolve().parents[2]
CLIENT_DIR = ROOT / "tests" / "clients" / "js"
SCRIPT = CLIENT_DIR / "client.mjs"
CLIENT_VERSION = "3.3.1"  # as pinned by tests/clients/js/package-lock.json
NODE_TIMEOUT_SECONDS = 180


def run_client(
    host: str, api_key: str, home: Path, script: Path = SCRIPT, **env: str
) -> dict[str, Any]:
    """Run a script of tests/clients/js (`env`: more variables it reads) and read its document."""
    node = shutil.which("node")
    installed = CLIENT_DIR / "node_modules" / "mem0ai" / "package.json"
    assert node and installed.is_file(), "Node or mem0ai is missing: run `make node-client`"
    env = {
        **os.environ,
        "ENGRAM_HOST": host,
        "ENGRAM_API_KEY": api_key,
        "MEM0_TELEMETRY": "false",
        "MEM0_DIR": str(home),  # where the client would keep its config: never ~/.mem0
        "MEM0_SOURCE": "engram-tests",
        "MEM0_APPLICATION": "js-client-check",
        **env,
    }
    done = subprocess.run(
        [node, str(script)], cwd=CLIENT_DIR, env=env, capture_output=True, text=True,
        timeout=NODE_TIMEOUT_SECONDS, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    assert (document["client"], document["version"]) == ("mem0ai", CLIENT_VERSION)
    return document


class Steps:
    """What each step of client.mjs returned (`ok`) or raised (`raised`)."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.steps: dict[str, dict[str, Any]] = document["steps"]

    def ok(self, name: str) -> Any:
        step = self.steps[name]
        assert step["ok"], f"{name} raised {step['error']}"
        return step["result"]

    def raised(self, name: str) -> dict[str, Any]:
        step = self.steps[name]
        assert not step["ok"], f"{name} returned {step['result']}"
        error: dict[str, Any] = step["error"]
        return error


def texts(listing: dict[str, Any]) -> list[str]:
    return [item["memory"] for item in listing["results"]]


def test_every_memory_method_of_the_javascript_client(live_api: str, tmp_path: Path) -> None:
    key = make_key("acme", "js-client")
    project = key.key.project
    with project_context(project.pk):  # a superseded chain for delete_linked
        (paris,) = add_texts(project, ["Erin lives in Paris"], user_id="erin")
    lyon = supersede(project.pk, str(paris.id), "Erin moved to Lyon")
    nice = supersede(project.pk, lyon, "Erin moved to Nice")

    steps = Steps(run_client(live_api, key.raw, tmp_path))

    assert steps.ok("ping") == {
        "organizationId": str(project.organization_id),
        "projectId": str(project.pk),
    }

    # add, without inference: one memory per message, the metadata kept as sent.
    added = steps.ok("add_raw")
    assert added["status"] == "SUCCEEDED"
    assert [(r["event"], r["memory"]) for r in added["results"]] == [
        ("ADD", "I love dark roast coffee"),
        ("ADD", "My sister lives in Lisbon"),
        ("ADD", "I am allergic to peanuts"),
    ]
    coffee, sister, peanuts = (r["id"] for r in added["results"])
    assert steps.ok("add_raw_frank")["results"][0]["memory"] == "Frank bakes bread"  # via filters

    # add, with inference: queued for a worker (none runs yet).
    inferred = steps.ok("add_inferred")
    assert inferred["status"] == "PENDING"
    dave_event = inferred["eventId"]

    # search, with filters and options (snake_cased by the client) and with logical filters.
    found = steps.ok("search")
    assert texts(found)[0] == "I love dark roast coffee"
    assert len(found["results"]) == 2  # topK
    assert found["results"][0]["metadata"] == {"source": "js-client", "Mixed_Case": 1}
    assert set(found["results"][0]["scoreBreakdown"]) == {
        "semantic", "bm25", "entity", "relevance", "distinctiveness", "answerGap", "ranker",
    }  # fmt: skip
    assert texts(steps.ok("search_logical_filters"))[0] == "My sister lives in Lisbon"
    invalid = steps.raised("search_invalid")
    assert (invalid["class"], invalid["code"]) == ("ValidationError", "HTTP_400")
    assert "top_k" in json.loads(invalid["message"])["detail"]

    # getAll, in pages.
    first, second = steps.ok("get_all_page_1"), steps.ok("get_all_page_2")
    assert (first["count"], len(first["results"]), second["count"]) == (3, 2, 3)
    assert first["next"] is not None and second["next"] is None
    assert {*texts(first), *texts(second)} == {
        "I love dark roast coffee", "My sister lives in Lisbon", "I am allergic to peanuts",
    }  # fmt: skip

    # get, update, history.
    assert steps.ok("get")["memory"] == "I love dark roast coffee"
    assert steps.ok("update")["memory"] == "I love light roast coffee"
    updated = steps.ok("get_after_update")
    assert (updated["memory"], updated["metadata"]) == ("I love light roast coffee", {"v": 2})
    history = steps.ok("history")
    assert [h["event"] for h in history] == ["ADD", "UPDATE"]
    assert (history[1]["oldMemory"], history[1]["newMemory"]) == (
        "I love dark roast coffee",
        "I love light roast coffee",
    )

    # feedback and exports.
    assert steps.ok("feedback") | {"id": None} == {
        "id": None, "feedback": "POSITIVE", "feedbackReason": "accurate",
    }  # fmt: skip
    export_id = steps.ok("create_memory_export")["id"]
    export = steps.ok("get_memory_export")
    assert (export["id"], export["count"]) == (export_id, 3)
    assert export["schema"] == {"type": "object", "properties": {"memory": {"type": "string"}}}
    assert "I love light roast coffee" in texts(export)
    assert steps.ok("get_memory_export_by_filters")["id"] == export_id

    # batchUpdate, batchDelete, delete.
    assert steps.ok("batch_update") == {"message": "Successfully updated 1 memories"}
    assert steps.ok("batch_delete") == {"message": "Successfully deleted 1 memories"}
    assert steps.ok("delete") == {"message": "Memory deleted successfully!"}
    assert texts(steps.ok("get_all_alice")) == ["My sister lives in Porto"]

    # delete with deleteLinked: the newest of the chain and the two versions it superseded.
    assert steps.ok("delete_linked") == {
        "message": "Memory deleted successfully!",
        "cascadeCount": 2,
    }
    assert steps.ok("get_all_erin_every_version")["results"] == []

    # users, deleteAll, deleteUser (v1 path) and deleteUsers (v2 path).
    users = steps.ok("users")
    assert {(u["type"], u["name"], u["totalMemories"]) for u in users["results"]} == {
        ("user", "alice", 1), ("user", "bob", 1), ("user", "carol", 1), ("user", "frank", 1),
    }  # fmt: skip
    assert steps.ok("delete_all") == {"message": "Memories deleted successfully!", "deleted": 1}
    carol_erasure = steps.ok("delete_user")
    assert carol_erasure["status"] == "PENDING"
    assert steps.ok("delete_users") == {"message": "Entity deleted successfully."}
    assert [u["name"] for u in steps.ok("users_after_deletes")["results"]] == ["alice"]

    # Errors the client maps from the server's answers.
    missing = steps.raised("get_missing")
    assert (missing["class"], missing["code"]) == ("MemoryNotFoundError", "HTTP_404")
    wrong_key = steps.raised("wrong_key")
    assert (wrong_key["class"], wrong_key["code"]) == ("AuthenticationError", "HTTP_401")

    # The database agrees.
    with project_context(project.pk):
        state = dict(Memory.objects.values_list("id", "state"))
        assert state[uuid.UUID(coffee)] == state[uuid.UUID(peanuts)] == "deleted"
        porto = Memory.objects.get(pk=sister)
        assert (porto.state, porto.text) == ("active", "My sister lives in Porto")
        for version in (paris.id, lyon, nice):
            assert state[uuid.UUID(str(version))] == "deleted"
        assert Memory.objects.get(user_id="bob").state == "deleted"
        changes = MemoryHistory.objects.filter(memory_id=coffee).order_by("created_at")
        assert [h.event for h in changes] == ["ADD", "UPDATE", "DELETE"]
        assert {h.actor for h in changes} == {f"api:{key.key.prefix}"}
        noted = Feedback.objects.get(memory_id=coffee)
        assert (noted.feedback, noted.feedback_reason) == ("POSITIVE", "accurate")
        assert MemoryExport.objects.filter(pk=export_id).exists()
        assert MemoryEvent.objects.get(pk=dave_event).status == "PENDING"
        erasures = ErasureRequest.objects.all()
        assert carol_erasure["eventId"] in {str(e.id) for e in erasures}
        assert len(erasures) == 2  # carol (v1 path) and frank (v2 path)
        requests = list(AccessLog.objects.order_by("created_at").values_list("path", "client"))

    # Every request but the client's ping (sent without them) carries its identity headers.
    for path, headers in requests:
        if path == "/v1/ping/":
            continue
        assert headers.get("X-Mem0-Client") == f"mem0-js/{CLIENT_VERSION}", path
        assert (headers["X-Mem0-Source"], headers["X-Application"]) == (
            "engram-tests",
            "js-client-check",
        )
    assert "/v3/memories/add/" in {path for path, _ in requests}

    # A real worker extracts dave's conversation and erases carol and frank.
    def settled() -> bool:
        with project_context(project.pk):
            event = MemoryEvent.objects.get(pk=dave_event)
            pending = ErasureRequest.objects.exclude(status=ErasureRequest.Status.SUCCEEDED)
            return event.status == "SUCCEEDED" and not pending.exists()

    worker = start_worker()
    try:
        assert wait_for(settled, 120), "the worker did not process the add and the erasures"
    finally:
        stop(worker)
    with project_context(project.pk):
        assert list(Memory.objects.filter(user_id="dave").values_list("text", flat=True)) == [
            "I love hiking in the Alps."
        ]
        assert not Memory.objects.filter(user_id__in=["carol", "frank"]).exists()
