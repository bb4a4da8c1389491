"""manage.py import_mem0: from a server speaking the Platform's API (another engram project: the
API is the same), from a Mem0 export file, and from a local fake of the Mem0 open-source
server's REST API."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings

from memory import jobs, mem0_sources
from memory.models import Memory, MemoryHistory
from tenants.actions import do_create_project_key
from tenants.db import project_context
from tenants.models import Project
from tests.factory import make_key
from tests.memory.test_mem0_client import supersede

pytestmark = pytest.mark.usefixtures("committed_db")


def _project(org: str, name: str) -> Project:
    return Project.objects.select_related("organization").get(organization__name=org, name=name)


def _memories(project_id: uuid.UUID) -> dict[str, Memory]:
    with project_context(project_id):
        return {str(m.id): m for m in Memory.objects.filter(project_id=project_id)}


def _history(project_id: uuid.UUID, memory_id: str) -> list[tuple[str, str | None, str | None]]:
    with project_context(project_id):
        rows = MemoryHistory.objects.filter(memory_id=memory_id).order_by("created_at")
        return [(r.event, r.old_memory, r.new_memory) for r in rows]


def _import(**options: Any) -> None:
    call_command("import_mem0", verbosity=0, **options)


# -- from a server speaking the Platform's API ---------------------------------------------------


@pytest.fixture
def source(live_api: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """A source project on a live server, through the official client: memories of two users
    and an agent, an update, a supersession chain, an immutable one, metadata, categories and
    an expiration date."""
    monkeypatch.setenv("MEM0_TELEMETRY", "False")
    monkeypatch.setenv("MEM0_DIR", str(tmp_path))
    from mem0 import MemoryClient

    key = make_key("mem0co", "source")
    client = MemoryClient(host=live_api, api_key=key.raw)

    def add(text: str, **options: Any) -> str:
        answer = client.add([{"role": "user", "content": text}], infer=False, **options)
        return str(answer["results"][0]["id"])

    ids = {
        "tea": add(
            "I drink green tea every morning",
            user_id="alice",
            metadata={"mood": "calm"},
            categories=["food"],
        ),
        "city": add("I live in Paris", user_id="alice"),
        "pin": add("My passport number ends in 42", user_id="alice", immutable=True),
        "bob": add("I play the cello", user_id="bob", expiration_date="2099-01-31"),
        "agent": add("Answer in French", agent_id="concierge"),
    }
    client.update(ids["tea"], text="I drink green tea every morning and evening")
    ids["lyon"] = supersede(key.key.project_id, ids["city"], "I moved to Lyon")
    try:
        yield live_api, key, ids
    finally:
        client.client.close()


def test_it_imports_a_platform_project_with_history_and_supersession(source: Any) -> None:
    """The source is on this instance, so its ids are taken: --new-ids, each source id kept in
    the metadata as mem0_id (the kept ids are tested with the other sources)."""
    url, key, ids = source
    with pytest.raises(CommandError, match="exists already in another project"):
        _import(api_url=url, api_key=key.raw, org="engram", project="clash")
    assert not Project.objects.filter(name="clash").exists()  # checked before it was made

    _import(api_url=url, api_key=key.raw, org="engram", project="moved", new_ids=True)
    target = _project("engram", "moved").pk
    before = _memories(key.key.project_id)
    after = {m.metadata.pop("mem0_id"): m for m in _memories(target).values()}

    assert set(after) == set(before)  # every memory, the superseded one too
    for ident, old in before.items():
        new = after[ident]
        kept = ("text", "user_id", "agent_id", "app_id", "run_id", "metadata", "categories")
        assert [getattr(new, f) for f in kept] == [getattr(old, f) for f in kept]
        assert (new.created_at, new.updated_at) == (old.created_at, old.updated_at)
        assert (new.expiration_date, new.immutable) == (old.expiration_date, old.immutable)
        assert new.state == old.state
    assert after[ids["city"]].state == Memory.State.SUPERSEDED
    assert after[ids["city"]].replaced_by_id == after[ids["lyon"]].id
    assert after[ids["pin"]].immutable

    tea = _history(target, str(after[ids["tea"]].id))
    assert tea == _history(key.key.project_id, ids["tea"])
    assert [event for event, _, _ in tea] == ["ADD", "UPDATE"]
    assert tea[1][1:] == (
        "I drink green tea every morning",
        "I drink green tea every morning and evening",
    )

    # Embedded here: search in the new project finds them.
    from mem0 import MemoryClient

    client = MemoryClient(
        host=url, api_key=do_create_project_key(_project("engram", "moved"), name="t").raw
    )
    try:
        found = client.search("what does alice drink?", filters={"user_id": "alice"}, top_k=1)
    finally:
        client.client.close()
    assert found["results"][0]["memory"] == "I drink green tea every morning and evening"


def test_running_it_again_imports_nothing_twice(source: Any) -> None:
    url, key, _ = source
    _import(api_url=url, api_key=key.raw, org="engram", project="twice", new_ids=True)
    target = _project("engram", "twice").pk
    with project_context(target):
        counts = (Memory.objects.count(), MemoryHistory.objects.count())
    _import(api_url=url, api_key=key.raw, org="engram", project="twice", new_ids=True)
    with project_context(target):
        assert (Memory.objects.count(), MemoryHistory.objects.count()) == counts
    assert counts[0] == 6


def test_a_refused_key_is_a_clear_error_and_writes_nothing(source: Any) -> None:
    url, _, _ = source
    with pytest.raises(CommandError, match="refused the key"):
        _import(api_url=url, api_key="m0-wrong", org="engram", project="refused")
    assert not Project.objects.filter(name="refused").exists()


# -- from an export file -------------------------------------------------------------------------


def _item(ident: str, text: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": ident,
        "memory": text,
        "user_id": "carol",
        "metadata": {},
        "categories": [],
        "created_at": "2025-03-04T10:00:00Z",
        "updated_at": "2025-03-04T10:00:00Z",
        **fields,
    }


def test_it_imports_an_export_file(tmp_path: Path) -> None:
    old, new = str(uuid.uuid4()), str(uuid.uuid4())
    history = [
        {
            "id": str(uuid.uuid4()),
            "event": "ADD",
            "old_memory": None,
            "new_memory": "I run",
            "created_at": "2025-03-04T10:00:00Z",
        },
    ]
    document = {
        "results": [
            _item(old, "I work at Acme", replaced_by=new, categories=["work"]),
            _item(new, "I work at Globex", session_id="chat-1", history=history),
            _item("mem-7", "I like jazz", metadata={"source": "app"}),
        ]
    }
    path = tmp_path / "export.json"
    path.write_text(json.dumps(document))
    _import(file=str(path), org="engram", project="from-file")
    target = _project("engram", "from-file").pk
    found = _memories(target)
    assert found[old].state == Memory.State.SUPERSEDED and str(found[old].replaced_by_id) == new
    assert found[new].run_id == "chat-1"
    assert found[new].created_at.isoformat() == "2025-03-04T10:00:00+00:00"
    (jazz,) = [m for m in found.values() if m.text == "I like jazz"]
    assert jazz.metadata == {"source": "app", "mem0_id": "mem-7"}
    assert [e for e, _, _ in _history(target, old)] == ["ADD"]  # one made at its creation
    assert _history(target, new) == [("ADD", None, "I run")]
    # The worker links them to the entities they name, as it does an add's.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT message->'args'->1 FROM dramatiq.queue WHERE message->>'actor_name' = %s "
            "AND message->'args'->>0 = %s",
            [jobs.LINK_ENTITIES.actor_name, str(target)],
        )
        (linked,) = cursor.fetchone()
    assert sorted(json.loads(linked) if isinstance(linked, str) else linked) == sorted(found)


def test_a_bad_export_file_is_refused_naming_the_memory(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_text(json.dumps([_item(str(uuid.uuid4()), "ok"), {"id": "x", "memory": 5}]))
    with pytest.raises(CommandError, match=r"item 1 \(memory x\): no text"):
        _import(file=str(path), org="engram", project="bad-file")
    assert not Project.objects.filter(name="bad-file").exists()


# -- from the open-source server -----------------------------------------------------------------


class FakeOss:
    """The Mem0 open-source server's read endpoints (server/main.py, routers/entities.py), with
    its X-API-Key check, over rows given by the test."""

    def __init__(self, memories: list[dict[str, Any]], history: dict[str, list[Any]]) -> None:
        self.memories, self.history, self.key = memories, history, "m0sk_test"
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.headers.get("X-API-Key") != fake.key:
                    return self.reply(401, {"detail": "Invalid API key"})
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                parts = url.path.strip("/").split("/")
                if parts == ["entities"]:
                    return self.reply(200, fake.entities())
                if parts == ["memories"]:
                    scope = {k: v for k, v in query.items() if k.endswith("_id")}
                    rows = [
                        m for m in fake.memories if all(m.get(k) == v for k, v in scope.items())
                    ]
                    return self.reply(200, {"results": rows[: int(query.get("top_k", 100))]})
                if len(parts) == 3 and parts[0] == "memories" and parts[2] == "history":
                    return self.reply(200, fake.history.get(parts[1], []))
                return self.reply(404, {"detail": "Not Found"})

            def reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def entities(self) -> list[dict[str, Any]]:
        found = set()
        for row in self.memories:
            for kind in ("user", "agent", "run"):
                if row.get(f"{kind}_id"):
                    found.add((kind, row[f"{kind}_id"]))
        return [{"id": name, "type": kind, "total_memories": 1} for kind, name in sorted(found)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _oss_row(ident: str, text: str, **payload: Any) -> dict[str, Any]:
    """A memory as the open-source server's GET /memories answers it."""
    return {
        "id": ident,
        "memory": text,
        "hash": "…",
        "metadata": {"actor_id": "dana", "role": "user", "topic": "travel"},
        "created_at": "2025-06-01T08:30:00.123456-07:00",
        "updated_at": "2025-06-02T09:00:00-07:00",
        "user_id": None,
        "agent_id": None,
        "run_id": None,
        **payload,
    }


@pytest.fixture
def oss() -> Iterator[FakeOss]:
    trip, pet = str(uuid.uuid4()), str(uuid.uuid4())
    server = FakeOss(
        [
            _oss_row(trip, "Going to Japan in May", user_id="dana", run_id="s1"),
            _oss_row(pet, "Has a dog named Rex", user_id="dana"),
            _oss_row(str(uuid.uuid4()), "Speaks to users formally", agent_id="helper"),
        ],
        {
            trip: [
                {
                    "id": str(uuid.uuid4()),
                    "memory_id": trip,
                    "old_memory": None,
                    "new_memory": "Going to Japan",
                    "event": "ADD",
                    "created_at": "2025-06-01T08:30:00-07:00",
                    "is_deleted": False,
                },
                {
                    "id": str(uuid.uuid4()),
                    "memory_id": trip,
                    "old_memory": "Going to Japan",
                    "new_memory": "Going to Japan in May",
                    "event": "UPDATE",
                    "created_at": "2025-06-02T09:00:00-07:00",
                    "is_deleted": False,
                },
            ]
        },
    )
    server.trip = trip  # type: ignore[attr-defined]
    yield server
    server.close()


def test_it_imports_from_the_open_source_server(oss: FakeOss) -> None:
    _import(oss_url=oss.url, api_key=oss.key, org="engram", project="from-oss")
    target = _project("engram", "from-oss").pk
    found = _memories(target)
    assert sorted(m.text for m in found.values()) == [
        "Going to Japan in May",
        "Has a dog named Rex",
        "Speaks to users formally",
    ]
    trip = found[oss.trip]  # type: ignore[attr-defined]
    assert (trip.user_id, trip.run_id, trip.actor_id, trip.role) == ("dana", "s1", "dana", "user")
    assert trip.metadata == {"topic": "travel"}
    assert trip.created_at.isoformat() == "2025-06-01T15:30:00.123456+00:00"
    assert _history(target, str(trip.id)) == [
        ("ADD", None, "Going to Japan"),
        ("UPDATE", "Going to Japan", "Going to Japan in May"),
    ]
    # Again: nothing twice, and the source is not asked for any history.
    oss.history.clear()
    _import(oss_url=oss.url, api_key=oss.key, org="engram", project="from-oss")
    assert len(_memories(target)) == 3
    assert len(_history(target, str(trip.id))) == 2


def test_the_open_source_server_without_its_key_is_a_clear_error(oss: FakeOss) -> None:
    with pytest.raises(CommandError, match=r"refused the key \(401\)"):
        _import(oss_url=oss.url, org="engram", project="no-key")


def test_a_source_that_is_down_is_a_clear_error(oss: FakeOss) -> None:
    url = oss.url
    oss.close()
    with pytest.raises(CommandError, match=r"GET .*entities"):
        _import(oss_url=url, api_key=oss.key, org="engram", project="down")


class Circular(FakeOss):
    """A Platform-shaped source gone wrong: its entity pages point back at themselves, or its
    memory pages ignore `page` and always answer the first one with `next` set."""

    def __init__(self, *, loop_entities: bool) -> None:
        super().__init__([], {})
        self.loop_entities = loop_entities
        self.memory_pages = 0
        fake = self
        handler = self.server.RequestHandlerClass

        def do_get(self: Any) -> None:
            if self.path.startswith("/v1/entities/"):
                following = f"{fake.url}/v1/entities/?page=2" if fake.loop_entities else None
                body = {"results": [{"type": "user", "name": "eve"}], "next": following}
                self.reply(200, body)
            elif self.path.endswith("/history/"):
                self.reply(200, [])
            else:
                self.reply(404, {"detail": "Not Found"})

        def do_post(self: Any) -> None:
            fake.memory_pages += 1
            row = _item(str(uuid.UUID(int=1)), "I like loops", user_id="eve")
            self.reply(200, {"count": 1, "next": "/v3/memories/?page=2", "results": [row]})

        handler.do_GET = do_get  # type: ignore[attr-defined]
        handler.do_POST = do_post  # type: ignore[attr-defined]


def test_a_source_whose_pages_go_round_in_circles_ends() -> None:
    entities = Circular(loop_entities=True)
    try:
        with pytest.raises(CommandError, match="came before"):
            _import(api_url=entities.url, api_key="k", org="engram", project="circle")
    finally:
        entities.close()
    pages = Circular(loop_entities=False)
    try:
        _import(api_url=pages.url, api_key="k", org="engram", project="same-page")
    finally:
        pages.close()
    assert pages.memory_pages == 2  # the second page held nothing new: the scope ended
    (memory,) = _memories(_project("engram", "same-page").pk).values()
    assert memory.text == "I like loops"


# -- one set of rules: what the API refuses, the import refuses, leaving nothing (issue #47) ----


def _refused(path: Path, message: str) -> None:
    """The command stops with one line naming what is wrong, and no project was made."""
    with pytest.raises(CommandError, match=message) as refusal:
        _import(file=str(path), org="engram", project="refused")
    assert "\n" not in str(refusal.value) and str(refusal.value).endswith("Nothing was written.")
    assert not Project.objects.filter(name="refused").exists()


def _export(tmp_path: Path, *items: dict[str, Any]) -> Path:
    path = tmp_path / "export.json"
    path.write_text(json.dumps({"results": [_item(str(uuid.uuid4()), "I like tea"), *items]}))
    return path


def test_a_memory_longer_than_the_api_takes_is_refused(tmp_path: Path) -> None:
    limit = settings.ENGRAM_MAX_TEXT_CHARS
    long = _item("m-long", "a" * (limit + 1))
    _refused(_export(tmp_path, long), rf"memory m-long: memory text: is {limit + 1} characters")


def test_metadata_the_api_refuses_is_refused(tmp_path: Path) -> None:
    deep: Any = "bottom"
    for _ in range(200):
        deep = {"in": deep}
    _refused(_export(tmp_path, _item("m-deep", "x", metadata=deep)), "nests deeper than 32")
    _refused(_export(tmp_path, _item("m-str", "x", metadata="a string")), "must be an object")
    big = _item("m-big", "x", metadata={"note": "a" * settings.ENGRAM_MAX_TEXT_CHARS})
    _refused(_export(tmp_path, big), "metadata: is .* characters of JSON")


def test_json_nested_thousands_deep_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    _refused(path, "nests deeper than 32 levels")
    lines = tmp_path / "deep.jsonl"
    lines.write_text(json.dumps(_item(str(uuid.uuid4()), "ok")) + "\n" + "[" * 100_000 + "\n")
    _refused(lines, "line 2 nests deeper than 32 levels")


def test_a_time_outside_the_years_the_api_takes_is_refused(tmp_path: Path) -> None:
    for moment in (10**30, 1e30, -1, "9999-12-31T23:59:59-15:00"):
        _refused(_export(tmp_path, _item("m-time", "x", created_at=moment)), "created_at")


def test_a_line_longer_than_any_record_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory of hundreds of megabytes, in small: JSON Lines are read a line at a time, each
    line no further than four request bodies; a JSON document is read whole only up to
    MAX_DOCUMENT_BYTES, and past it as JSON Lines."""
    path = tmp_path / "export.jsonl"
    good = json.dumps(_item(str(uuid.uuid4()), "I like tea"))
    path.write_text(good + "\n" + json.dumps(_item("m-huge", "a" * 5000)) + "\n")
    monkeypatch.setattr(mem0_sources, "MAX_DOCUMENT_BYTES", 2048)
    document = _export(tmp_path, _item("m-huge", "a" * 5000))
    with override_settings(ENGRAM_MAX_BODY_BYTES=1024):
        _refused(path, "line 2 is longer than 4096 bytes")
        _refused(document, "line 1 is longer than 4096 bytes.*read as JSON Lines")
