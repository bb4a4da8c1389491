"""The agent frameworks' own Mem0 integrations against a live engram (tests/compat/README.md).

Each folder's driver runs in its framework's environment (`make compat` installs them), against
a live server and a real worker (offline extractor), for two users of one project; this checks
what the driver saw and what the database holds. What an integration cannot do at all (no list
method, no delete) its driver leaves out with the reason, and CANNOT below names it: a driver
that skips anything else, or a step that fails, fails the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory.models import Memory
from tenants.db import project_context
from tests.factory import make_key
from tests.memory.test_events import start_worker, stop

HERE = Path(__file__).resolve().parent
# Where scripts/install-compat.sh puts each Python framework's environment.
COMPAT_ENVS = Path.home() / ".cache" / "engram" / "compat"
FRAMEWORKS = sorted(
    d.name for d in HERE.iterdir() if (d / "driver.py").is_file() or (d / "driver.mjs").is_file()
)
# The integration package of each JavaScript folder (its version is checked against the lock).
JS_PACKAGES = {
    "langchainjs": "@langchain/community",
    "mastra": "@mastra/mem0",
    "vercelai": "@mem0/vercel-ai-provider",
}
STEPS = (
    "add_alice",
    "add_bob",
    "search_alice",
    "search_bob",
    "list_alice",
    "delete_alice",
    "list_alice_after_delete",
)
PEANUTS, LISBON = "I am allergic to peanuts.", "I live in Lisbon and I play the cello."
# The steps each integration has no way to do (its driver's "skipped" says why; docs/frameworks.md).
CANNOT: dict[str, set[str]] = {
    # agno 3.1.10 passes user_id top-level to mem0ai 2.x's search() and get_all(), which refuse it.
    "agno": {"search_alice", "search_bob", "list_alice", "list_alice_after_delete"},
    "autogen": {"list_alice", "list_alice_after_delete"},
    "crewai": {"list_alice", "delete_alice", "list_alice_after_delete"},
    "haystack": {"delete_alice", "list_alice_after_delete"},
    "llamaindex": {"list_alice", "delete_alice", "list_alice_after_delete"},
    "msaf": set(),
    "praisonai": set(),
    "strands": set(),
    "langchainjs": {"delete_alice", "list_alice_after_delete"},
    "mastra": {"list_alice", "delete_alice", "list_alice_after_delete"},
    "vercelai": {"list_alice", "delete_alice", "list_alice_after_delete"},
}
DRIVER_TIMEOUT_SECONDS = 300


def pinned(framework: str) -> str:
    """The integration's version, as its requirements.txt (the first line) or its
    package-lock.json pins it."""
    if framework in JS_PACKAGES:
        lock = json.loads((HERE / framework / "package-lock.json").read_text())
        return str(lock["packages"][f"node_modules/{JS_PACKAGES[framework]}"]["version"])
    first = (HERE / framework / "requirements.txt").read_text().splitlines()[0]
    return first.split("==")[1].strip()


@pytest.fixture
def worker(committed_db: None) -> Iterator[None]:
    process = start_worker()
    yield
    stop(process)


def run_driver(framework: str, host: str, api_key: str, run: str, home: Path) -> dict[str, Any]:
    folder = HERE / framework
    if framework in JS_PACKAGES:
        node = shutil.which("node")
        installed = folder / "node_modules" / ".engram-compat-sha256"
        assert node and installed.is_file(), f"{framework} is not installed: run `make compat`"
        command = [node, str(folder / "driver.mjs")]
    else:
        python = COMPAT_ENVS / framework / "bin" / "python"
        assert python.is_file(), f"{framework} is not installed: run `make compat`"
        command = [str(python), str(folder / "driver.py")]
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),  # nothing a framework writes lands in the real home
        "LANG": "C.UTF-8",
        "ENGRAM_HOST": host,
        "ENGRAM_API_KEY": api_key,
        "ENGRAM_RUN": run,
    }
    done = subprocess.run(
        command, cwd=folder if framework in JS_PACKAGES else home, env=env,
        capture_output=True, text=True, timeout=DRIVER_TIMEOUT_SECONDS, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def texts(step: dict[str, Any]) -> list[str]:
    assert step["ok"], step["error"]
    assert isinstance(step["result"], list)
    return [str(t) for t in step["result"]]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_integration_stores_finds_and_keeps_users_apart(
    framework: str, live_api: str, worker: None, tmp_path: Path
) -> None:
    key = make_key("acme", f"compat-{framework}")
    run = uuid.uuid4().hex[:8]
    document = run_driver(framework, live_api, key.raw, run, tmp_path)
    assert (document["framework"], document["version"]) == (framework, pinned(framework))
    alice, bob = document["users"]["alice"], document["users"]["bob"]
    assert (alice, bob) == (f"{run}-alice", f"{run}-bob")
    steps, skipped = document["steps"], document.get("skipped", {})
    assert set(skipped) == CANNOT[framework], skipped
    assert all(reason for reason in skipped.values())
    assert set(steps) == set(STEPS) - set(skipped)
    failed = {name: step["error"] for name, step in steps.items() if not step["ok"]}
    assert failed == {}
    if "search_alice" in steps:
        found = texts(steps["search_alice"])
        assert any("peanuts" in t for t in found) and not any("Lisbon" in t for t in found)
        found = texts(steps["search_bob"])
        assert any("Lisbon" in t for t in found) and not any("peanuts" in t for t in found)
    if "list_alice" in steps:
        assert texts(steps["list_alice"]) == [PEANUTS]
    if "list_alice_after_delete" in steps:
        assert texts(steps["list_alice_after_delete"]) == []
    # What the database holds: each fact in its own user's scope, nothing in another's.
    with project_context(key.key.project_id):
        active = list(Memory.objects.active().values_list("user_id", "text"))
        deleted = list(Memory.objects.exclude(state=Memory.State.ACTIVE).values_list("user_id"))
    expected = [(bob, LISBON)] if "delete_alice" in steps else [(alice, PEANUTS), (bob, LISBON)]
    assert sorted(active) == sorted(expected)
    if "delete_alice" in steps:
        assert (alice,) in deleted
