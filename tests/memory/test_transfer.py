"""export_project / import_project (issue #28 item 6): a project file round trip leaves search,
history, the graph and its traversal as they were, under kept or fresh ids; an import runs twice
without doubling anything, resumes after a failure, and refuses a broken file writing nothing.

Real Postgres, AGE and the local embedder; the graph is built by the offline extractor.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import random
import string
import tracemalloc
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from django.test import TestCase, override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase as HypothesisTestCase

from memory import actions, graph
from memory.actions import Actor, NewMemory
from memory.actions import transfer as transfer_actions
from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.pipeline import process_event
from memory.graph.transfer import count_graph
from memory.models import (
    EntityVector,
    Feedback,
    Memory,
    MemoryEntity,
    MemoryEvent,
    MemoryHistory,
    ScopeSummary,
)
from memory.queries.transfer import embedding_dimensions, embedding_model
from memory.text.embeddings import embed
from memory.text.recognise import MAX_NAME
from memory.transfer_format import (
    FORMAT,
    MEMORY,
    RECORD_TYPES,
    VERSION,
    FormatError,
    record_of,
    row_values,
)
from tenants.actions import do_create_project_key
from tenants.db import project_context
from tenants.models import Organization, Project
from tests.base import BaseTestCase
from tests.factory import add_texts, auth, make_key

ALICE = graph.Scope(user_id="alice")
SCOPE = {"user_id": "alice", "agent_id": None, "app_id": None, "run_id": None}
QUERIES = ("where does alice live", "hiking in the mountains", "the dog")
Ids = Callable[[Any], Any]


def same(value: Any) -> Any:
    return value


class TransferTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project = self.alice.key.project
        self.build()

    @pytest.fixture(autouse=True)
    def _files(self, tmp_path: Path) -> None:
        self.dir = tmp_path

    # -- the source project -----------------------------------------------------------------

    def build(self) -> None:
        pid = self.project.pk
        with project_context(pid):
            hiking, rome = add_texts(
                self.project,
                ["I love hiking in the Alps", "My sister Anna lives in Rome"],
                user_id="alice",
            )
        for message in ("I live in Paris.", "I love sushi.", "My dog is called Rex."):
            self.extract(message)
        self.extract("I just moved to Berlin.")  # invalidates lives_in paris
        who = Actor.command("test")
        vector = embed(["Alice drinks green tea"])[0]
        tea = actions.do_create_memory(
            pid,
            NewMemory("Alice drinks green tea", vector, SCOPE, {"mood": "calm"}, ["food"]),
            actor=who,
        )
        # A chain of three versions.
        chai = actions.do_supersede_memory(tea, self.new("Alice drinks chai"), actor=who)
        actions.do_supersede_memory(chai, self.new("Alice drinks black coffee"), actor=who)
        actions.do_update_memory(hiking, actor=who, text="I love hiking in the Dolomites")
        actions.do_delete_memory(rome, actor=who)
        actions.do_record_feedback(hiking, feedback="POSITIVE", reason="spot on")
        pin = actions.do_create_memory(
            pid,
            self.new(
                "Alice's locker code is 1234",
                immutable=True,
                expiration_date=timezone.now().date() + timedelta(days=30),
                categories=["personal_details"],
            ),
            actor=who,
        )
        secret = actions.do_create_memory(
            pid, self.new("SECRET-PIN-4242 opens the safe"), actor=who
        )
        actions.do_redact_memory(secret, actor=who, reason="asked")
        with project_context(pid):
            ScopeSummary.objects.create(project_id=pid, text="Alice moved to Berlin.", **SCOPE)
            add_texts(self.project, ["Bob-ERASED-77 likes golf"], user_id="bob")
        actions.do_erase_user(self.project, "bob", actor=who)
        self.pin = pin

    def extract(self, message: str) -> None:
        body = {"messages": [{"role": "user", "content": message}], "scope": SCOPE}
        with project_context(self.project.pk):
            event = MemoryEvent.objects.create(project=self.project, payload=body, **SCOPE)
        process_event(event.id, self.project.pk, OfflineExtractor())

    def new(self, text: str, **extra: Any) -> NewMemory:
        extra.setdefault("categories", [])
        return NewMemory(text, embed([text])[0], SCOPE, extra.pop("metadata", {}), **extra)

    # -- commands ---------------------------------------------------------------------------

    def export(self, name: str = "acme.jsonl", project: Project | None = None) -> Path:
        path = self.dir / name
        target = project or self.project
        call_command("export_project", str(path), project_id=str(target.pk), verbosity=0)
        return path

    def load(self, path: Path, project: str, **options: Any) -> Project:
        call_command(
            "import_project", str(path), org="acme", project=project, verbosity=0, **options
        )
        return Project.objects.get(organization__name="acme", name=project)

    # -- what must survive ------------------------------------------------------------------

    def snapshot(self, project_id: uuid.UUID, ids: Ids = same) -> dict[str, Any]:
        """Everything a round trip keeps, with the source's ids put through `ids`."""
        with project_context(project_id):
            memories = {
                ids(m.id): (
                    m.text,
                    m.state,
                    ids(m.replaced_by_id),
                    m.metadata,
                    m.categories,
                    m.immutable,
                    m.created_at,
                    m.updated_at,
                    m.expiration_date,
                    m.scope,
                    m.hash,
                    [round(float(x), 6) for x in m.embedding],
                    ids(m.source_event_id),
                    m.source_positions,
                    ids(m.conversation_id),
                    m.role,
                    m.seq,
                    m.structured_attributes,
                    m.context_before,
                    m.context_after,
                )
                for m in Memory.objects.filter(project_id=project_id)
            }
            history = {
                ids(h.id): (
                    ids(h.memory_id),
                    h.event,
                    h.old_memory,
                    h.new_memory,
                    h.actor,
                    ids(h.event_id),
                    h.input,
                    h.metadata,
                    h.categories,
                    h.created_at,
                    h.scope,
                )
                for h in MemoryHistory.objects.filter(project_id=project_id)
            }
            feedback = {
                ids(f.id): (ids(f.memory_id), f.feedback, f.feedback_reason, f.created_at)
                for f in Feedback.objects.filter(project_id=project_id)
            }
            events = {
                ids(e.id): (e.status, e.payload, e.created_at, e.completed_at, e.usage)
                for e in MemoryEvent.objects.filter(project_id=project_id)
            }
            summaries = {
                (s.text, s.updated_at) for s in ScopeSummary.objects.filter(project_id=project_id)
            }
            links = {
                (ids(link.memory_id), link.entity_name, link.created_at)
                for link in MemoryEntity.objects.filter(project_id=project_id)
            }
            vectors = {
                (v.entity_name, tuple(round(float(x), 6) for x in v.embedding))
                for v in EntityVector.objects.filter(project_id=project_id)
            }
        return {
            "memories": memories,
            "history": history,
            "feedback": feedback,
            "events": events,
            "summaries": summaries,
            "links": links,
            "vectors": vectors,
            "graph": self.graph(project_id, ids),
        }

    def graph(self, project_id: uuid.UUID, ids: Ids = same) -> dict[str, Any]:
        relations = graph.relations(project_id, ALICE, include_invalid=True, limit=500)
        walk = graph.traverse(project_id, ALICE, "alice", depth=2, include_invalid=True)
        with project_context(project_id):
            vertex_names = {
                link.vertex_id: link.entity_name
                for link in MemoryEntity.objects.filter(project_id=project_id)
                if link.vertex_id is not None
            }
        return {
            "relations": {
                (
                    r.source,
                    r.relationship,
                    r.destination,
                    r.valid,
                    r.created_at,
                    r.invalidated_at,
                    tuple(str(ids(uuid.UUID(m))) for m in r.memory_ids),
                    r.event_id and str(ids(uuid.UUID(r.event_id))),
                )
                for r in relations
            },
            "nodes": {
                (n.name, n.display_name, n.type, n.created_at, n.mentions) for n in walk.nodes
            },
            "walk": {(r.source, r.relationship, r.destination, r.valid) for r in walk.relations},
            # Each link names the vertex of its entity in its own graph.
            "linked": {
                name: graph.entities_by_id(project_id, [vertex]).get(vertex, None) is not None
                for vertex, name in vertex_names.items()
            },
        }

    def search(self, project: Project) -> list[list[tuple[str, str, float]]]:
        key = do_create_project_key(project, name=f"search {uuid.uuid4()}")
        found = []
        for query in QUERIES:
            # Every match (a tie's order is by id, which --new-ids changes), best first.
            body = {"query": query, "filters": {"user_id": "alice"}, "limit": 50}
            response = self.client.post(
                "/v2/memories/search/", body, content_type="application/json", headers=auth(key.raw)
            )
            assert response.status_code == 200, response.content
            scored = [(m["id"], m["memory"], round(m["score"], 6)) for m in response.json()]
            found.append(sorted(scored, key=lambda m: (-m[2], m[1])))
        return found

    def traverse(self, project: Project, ids: Ids = same) -> dict[str, Any]:
        """POST /v1/graph/traverse/ from alice, 2 hops, ended relations too; graph ids left
        out (AGE numbers them), memory and event ids through `ids`."""
        key = do_create_project_key(project, name=f"graph {uuid.uuid4()}")
        body = {
            "entity": "Alice", "depth": 2, "include_invalid": True,
            "filters": {"user_id": "alice"},
        }  # fmt: skip
        response = self.client.post(
            "/v1/graph/traverse/", body, content_type="application/json", headers=auth(key.raw)
        )
        assert response.status_code == 200, response.content
        found = response.json()
        drop = ("id", "source_id", "destination_id", "memory_ids", "event_id")
        relations = [
            {k: v for k, v in r.items() if k not in drop}
            | {
                "memory_ids": sorted(str(ids(uuid.UUID(m))) for m in r["memory_ids"]),
                "event_id": r["event_id"] and str(ids(uuid.UUID(r["event_id"]))),
            }
            for r in found["relations"]
        ]
        nodes = [{k: v for k, v in n.items() if k != "id"} for n in found["nodes"]]
        order = json.dumps
        return {"nodes": sorted(nodes, key=order), "relations": sorted(relations, key=order)}

    def history(self, project: Project, memory_id: Any) -> list[tuple[Any, ...]]:
        key = do_create_project_key(project, name=f"history {uuid.uuid4()}")
        response = self.client.get(f"/v1/memories/{memory_id}/history/", headers=auth(key.raw))
        assert response.status_code == 200, response.content
        return [(h["event"], h["old_memory"], h["new_memory"]) for h in response.json()]

    def fresh(self, target: Project) -> Ids:
        def ids(old: Any) -> Any:
            return (
                None if old is None else uuid.uuid5(transfer_actions.NEW_IDS, f"{target.pk}:{old}")
            )

        return ids

    # -- the tests --------------------------------------------------------------------------

    def test_the_source_has_what_a_round_trip_must_keep(self) -> None:
        before = self.snapshot(self.project.pk)
        states = {m[1] for m in before["memories"].values()}
        assert states == {"active", "superseded", "deleted", "redacted"}
        assert ("alice", "lives_in", "paris") in {r[:3] for r in before["graph"]["relations"]}
        assert any(not r[3] for r in before["graph"]["relations"])  # an invalidated relation
        assert before["feedback"] and before["summaries"] and before["links"] and before["vectors"]

    def test_a_copy_under_new_ids_searches_traverses_and_remembers_the_same(self) -> None:
        path = self.export()
        copy = self.load(path, "copy", new_ids=True)
        ids = self.fresh(copy)
        assert self.snapshot(copy.pk) == self.snapshot(self.project.pk, ids)
        mapped = [
            [(str(ids(uuid.UUID(i))), t, s) for i, t, s in q] for q in self.search(self.project)
        ]
        assert self.search(copy) == mapped
        assert mapped[0]  # the searches found something
        walked = self.traverse(self.project, ids)
        assert self.traverse(copy) == walked
        assert {r["valid"] for r in walked["relations"]} == {True, False}  # ended ones too
        chain_end = self.memory_id("Alice drinks black coffee")
        assert self.history(copy, ids(chain_end)) == self.history(self.project, chain_end)
        with project_context(copy.pk):
            assert Memory.objects.get(pk=ids(self.pin.pk)).immutable

    def test_a_restore_after_the_source_is_gone_keeps_every_id(self) -> None:
        path = self.export("backup.jsonl.gz")
        assert path.read_bytes()[:2] == b"\x1f\x8b"
        before = self.snapshot(self.project.pk)
        searched = self.search(self.project)
        actions.do_erase_user(self.project, "alice", actor=Actor.command("test"))
        assert self.snapshot(self.project.pk)["memories"] == {}
        restored = self.load(path, "restored")
        assert restored.pk != self.project.pk  # the source project's id is taken here
        assert self.snapshot(restored.pk) == before
        assert self.search(restored) == searched
        # Its ids are taken now: into the project it came from, it is refused.
        with pytest.raises(CommandError, match="exists already in another project"):
            call_command("import_project", str(path), project_id=str(self.project.pk))
        assert self.snapshot(self.project.pk)["memories"] == {}

    def test_a_file_holds_no_erased_or_redacted_text(self) -> None:
        text = self.export().read_text()
        assert "SECRET-PIN-4242" not in text
        assert "Bob-ERASED-77" not in text
        assert '"user_id":"bob"' not in text

    def test_running_an_import_twice_imports_nothing_twice(self) -> None:
        path = self.export()
        for options in ({"new_ids": True}, {}):
            name = f"twice-{bool(options)}"
            if not options:  # kept ids: the source must be gone first
                actions.do_erase_user(self.project, "alice", actor=Actor.command("test"))
            first = self.load(path, name, **options)
            once = self.snapshot(first.pk)
            graph_once = self.count_graph(first.pk)
            assert self.load(path, name, **options).pk == first.pk
            assert self.snapshot(first.pk) == once
            assert self.count_graph(first.pk) == graph_once

    def test_a_failed_import_resumes_where_it_stopped(self) -> None:
        path = self.export()
        real = transfer_actions.do_import_batch
        calls = {"n": 0}

        def failing(target: Any, kind: str, records: Any) -> Any:
            if not target.dry_run:
                calls["n"] += 1
                if calls["n"] == 4:
                    raise RuntimeError("the machine stopped")
            return real(target, kind, records)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("memory.management.commands.import_project.do_import_batch", failing)
            with pytest.raises(RuntimeError):
                self.load(path, "resumed", new_ids=True, batch_size=2)
        resumed = Project.objects.get(name="resumed")
        assert len(self.snapshot(resumed.pk)["memories"]) > 0 or self.count_graph(resumed.pk)[0] > 0
        self.load(path, "resumed", new_ids=True, batch_size=2)
        assert self.snapshot(resumed.pk) == self.snapshot(self.project.pk, self.fresh(resumed))

    def test_another_embedding_model_embeds_again(self) -> None:
        path = self.export()
        lines = path.read_text().splitlines()
        header = json.loads(lines[0])
        header["embedding"]["model"] = "openai-compatible:another-model"
        header["embedding"]["dimensions"] = 1536
        path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
        copy = self.load(path, "reembedded", new_ids=True)
        # The same local model here: the vectors made again are the ones exported.
        assert self.snapshot(copy.pk) == self.snapshot(self.project.pk, self.fresh(copy))

    # -- refusals: a clear error and nothing written ----------------------------------------

    def refused(self, path: Path, message: str, **options: Any) -> None:
        options.setdefault("new_ids", True)
        with pytest.raises(CommandError, match=message) as refusal:
            self.load(path, "broken", **options)
        assert str(refusal.value).endswith("Nothing was written.")
        assert not Project.objects.filter(name="broken").exists()

    def rewrite(self, path: Path, change: Callable[[list[str]], list[str]]) -> Path:
        broken = self.dir / "broken.jsonl"
        broken.write_text("".join(line + "\n" for line in change(path.read_text().splitlines())))
        return broken

    def test_a_truncated_file_is_refused_with_nothing_written(self) -> None:
        path = self.export()
        self.refused(self.rewrite(path, lambda lines: lines[:-5]), "cut short")
        self.refused(self.rewrite(path, lambda lines: lines[:1]), "cut short")

    def test_a_truncated_gzip_file_is_refused_with_nothing_written(self) -> None:
        path = self.export("cut.jsonl.gz")
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        self.refused(path, "cannot be read")

    def test_a_corrupt_line_is_refused_with_nothing_written(self) -> None:
        path = self.export()

        def corrupt(at: int, text: str) -> Callable[[list[str]], list[str]]:
            return lambda lines: [text if n == at else line for n, line in enumerate(lines)]

        last = len(path.read_text().splitlines()) - 2
        self.refused(self.rewrite(path, corrupt(last, "{not json")), f"line {last + 1} is not JSON")
        self.refused(self.rewrite(path, corrupt(last, "[1, 2]")), "not a JSON object")
        self.refused(self.rewrite(path, corrupt(last, '{"type": "spell"}')), "unknown type")
        memory = next(
            n
            for n, line in enumerate(path.read_text().splitlines())
            if line.startswith('{"type":"memory"') and '"state":"active"' in line
        )
        bad_state = self.rewrite(path, lambda lines: [
            line.replace('"state":"active"', '"state":"bogus"') if n == memory else line
            for n, line in enumerate(lines)
        ])  # fmt: skip
        self.refused(bad_state, "not one of the allowed values")
        short_vector = self.rewrite(path, lambda lines: [
            _with(line, embedding="AAAA") if n == memory else line for n, line in enumerate(lines)
        ])  # fmt: skip
        self.refused(short_vector, "384 dimensions")
        shuffled = self.rewrite(
            path, lambda lines: [lines[0], lines[memory], *lines[1:memory], *lines[memory + 1 :]]
        )
        self.refused(shuffled, "after the")

    def test_another_version_or_no_header_is_refused(self) -> None:
        path = self.export()
        later = self.rewrite(path, lambda lines: [_with(lines[0], version=2), *lines[1:]])
        self.refused(later, "version 2 of the format; this engram reads version 1")
        self.refused(self.rewrite(path, lambda lines: lines[1:]), "not the header")
        empty = self.dir / "empty.jsonl"
        empty.write_text("")
        self.refused(empty, "empty")

    def test_a_kept_id_of_another_project_is_refused_with_nothing_written(self) -> None:
        path = self.export()
        self.refused(path, "exists already in another project.*--new-ids", new_ids=False)

    def test_a_dangling_reference_is_refused_with_nothing_written(self) -> None:
        path = self.export()
        lines = path.read_text().splitlines()
        feedback = next(n for n, line in enumerate(lines) if line.startswith('{"type":"feedback"'))
        orphan = self.rewrite(path, lambda ls: [
            _with(line, memory_id=str(uuid.uuid4())) if n == feedback else line
            for n, line in enumerate(ls)
        ])  # fmt: skip
        self.refused(orphan, "a feedback record refers to a row the file does not hold")

    def test_the_help_says_what_it_does(self) -> None:
        for command, words in (
            ("export_project", ("gzip", "snapshot", "erased", "access log")),
            (
                "import_project",
                ("--new-ids", "Idempotent", "resumable", "rolled back", "made again"),
            ),
        ):
            from django.core.management import load_command_class

            text = load_command_class("memory", command).help
            assert all(w.lower() in text.lower() for w in words), (command, words)

    def count_graph(self, project_id: uuid.UUID) -> tuple[int, int]:
        with project_context(project_id):
            return count_graph(project_id)

    def memory_id(self, text: str) -> uuid.UUID:
        with project_context(self.project.pk):
            return Memory.objects.get(project_id=self.project.pk, text=text).pk


def _with(line: str, **changes: Any) -> str:
    return json.dumps({**json.loads(line), **changes})


def _valid_memory() -> dict[str, Any]:
    moment = timezone.now()
    memory = Memory(
        id=uuid.uuid4(), text="Alice likes tea", hash="0" * 64, embedding=[0.5] * 384,
        user_id="alice", seq=7, created_at=moment, updated_at=moment,
        structured_attributes={"day": 1}, source_positions=[0],
    )  # fmt: skip
    return record_of(MEMORY, memory)


HOSTILE = (
    "\x00", "a\x00b", "\ud800", float("nan"), float("inf"), 2**70, -1, "", "x" * 300,
    {"a": "\x00"}, ["\ud800"], {"n": float("nan")}, [1, -1], True, None, str(uuid.uuid4()),
    "2026-01-01", "2026-01-01T00:00:00", "2026-01-01T00:00:00+00:00",
)  # fmt: skip
JSON = st.sampled_from(HOSTILE) | st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


class RecordFuzzTestCase(HypothesisTestCase):
    project: ClassVar[Project]

    @classmethod
    def setUpTestData(cls) -> None:
        cls.project = make_key("acme", "fuzz").key.project

    @settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(st.sampled_from(sorted(_valid_memory())), JSON)
    def test_any_value_in_a_record_is_written_or_refused_as_a_format_error(
        self, key: str, value: Any
    ) -> None:
        """A file is input: whatever a field holds, the record is written or refused as a
        format error, never a database error in the middle of a batch."""
        record = _valid_memory()
        record[key] = value
        # As the check pass does: deferred foreign keys are checked at the end of the batch.
        target = transfer_actions.Target(self.project.pk, 384, dry_run=True)
        with contextlib.suppress(FormatError):
            assert transfer_actions.do_import_batch(target, MEMORY, [record]).written == 1

    @settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(st.sampled_from(["name", "scope", "type", "mentions", "created_at", "extra"]), JSON)
    def test_any_property_of_an_entity_is_written_or_refused_as_a_format_error(
        self, key: str, value: Any
    ) -> None:
        properties = {
            "name": "rex", "display_name": "Rex", "type": "animal", "created_at": "",
            "mentions": 1, **graph.Scope(user_id="alice").properties(),
        }  # fmt: skip
        record = {"type": "entity", "id": 1, "properties": properties | {key: value}}
        target = transfer_actions.Target(self.project.pk, 384)
        with contextlib.suppress(FormatError):
            transfer_actions.do_import_batch(target, "entity", [record])


def test_an_event_record_of_an_earlier_engram_without_a_warning_reads_as_none() -> None:
    """MemoryEvent.warning came after the format's version 1: a file without it still loads."""
    record: dict[str, Any] = {
        "type": "event", "id": str(uuid.uuid4()), "user_id": "alice", "agent_id": None,
        "app_id": None, "run_id": None, "status": "SUCCEEDED", "payload": {}, "results": [],
        "graph": {}, "error": "", "extractor": "offline", "attempts": 1, "usage": {},
        "timings": {}, "created_at": "2026-01-01T00:00:00+00:00", "started_at": None,
        "completed_at": None, "reverted_at": None, "reverted_by": "", "reversal": {},
    }  # fmt: skip
    assert row_values("event", record, dimensions=384)["warning"] == ""
    with pytest.raises(FormatError, match="needs 'error'"):
        row_values("event", {k: v for k, v in record.items() if k != "error"}, dimensions=384)


# -- one set of rules: what the API refuses, an import refuses (issue #47) ---------------------


def _entity(ident: int, name: str) -> dict[str, Any]:
    properties = {
        "name": name, "display_name": name.title(), "type": "person", "created_at": "",
        "mentions": 1, **graph.Scope(user_id="alice").properties(),
    }  # fmt: skip
    return {"type": "entity", "id": ident, "properties": properties}


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"in": value}
    return value


class ImportRulesTestCase(TestCase):
    """Files built by hand, each holding one thing the API would refuse: the command refuses it
    in one line, --check as the import, and leaves no project (nor its organization) behind."""

    @pytest.fixture(autouse=True)
    def _files(self, tmp_path: Path) -> None:
        self.dir = tmp_path

    def write(self, *records: dict[str, Any], lines: tuple[str, ...] = ()) -> Path:
        """A project file of `records` (then the raw `lines`), its header's and end's counts
        those of the records."""
        counts = dict.fromkeys(RECORD_TYPES, 0)
        for record in records:
            counts[record["type"]] += 1
        header = {
            "format": FORMAT, "version": VERSION,
            "project": {"id": str(uuid.uuid4()), "name": "source", "description": ""},
            "embedding": {"model": embedding_model(), "dimensions": embedding_dimensions()},
            "counts": counts,
        }  # fmt: skip
        path = self.dir / "project.jsonl"
        body = [json.dumps(r) for r in (header, *records)]
        path.write_text("\n".join([*body, *lines, json.dumps({"type": "end", "counts": counts})]))
        return path

    def memory(self, **changes: Any) -> dict[str, Any]:
        return _valid_memory() | changes

    def refused(self, path: Path, message: str, *, check: bool = False) -> None:
        with pytest.raises(CommandError, match=message) as refusal:
            call_command(
                "import_project", str(path), org="neworg", project="target", check=check,
                verbosity=0,
            )  # fmt: skip
        assert "\n" not in str(refusal.value)
        assert str(refusal.value).endswith("Nothing was written.")
        assert not Project.objects.filter(name="target").exists()
        assert not Organization.objects.filter(name="neworg").exists()

    def test_a_valid_hand_made_file_imports(self) -> None:
        """The files below differ from this one by the one value each refuses."""
        path = self.write(_entity(1, "anna"), self.memory())
        call_command("import_project", str(path), org="neworg", project="target", verbosity=0)
        project = Project.objects.get(name="target")
        with project_context(project.pk):
            assert Memory.objects.get().text == "Alice likes tea"
            assert count_graph(project.pk) == (1, 0)

    def test_a_line_longer_than_any_record_is_refused_before_it_is_read_whole(self) -> None:
        """A gzip file of a few kilobytes holding a 64 MiB line: read no further than the cap
        (8 MiB by default, four request bodies), which the memory the reader holds shows."""
        cap = 4 * django_settings.ENGRAM_MAX_BODY_BYTES
        path = self.dir / "long.jsonl.gz"
        header = self.write().read_text().splitlines()[0]
        with gzip.open(path, "wb", compresslevel=1) as out:
            out.write(header.encode() + b"\n" + b'{"type": "memory", "text": "')
            for _ in range(64):
                out.write(b"a" * 2**20)
        assert path.stat().st_size < 2**20
        tracemalloc.start()
        try:
            self.refused(path, f"line 2 is longer than {cap} bytes")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 3 * cap  # the whole line would be 64 MiB, and as text as much again

    @override_settings(ENGRAM_MAX_BODY_BYTES=2048)
    def test_the_line_cap_is_four_request_bodies(self) -> None:
        fits = self.memory(text="a" * 4000)
        self.refused(self.write(fits, self.memory(text="a" * 9000)), "line 3 is longer than 8192")

    def test_json_nested_thousands_deep_is_refused(self) -> None:
        deep = '{"type": "memory", "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}"
        self.refused(self.write(lines=(deep,)), "line 2 nests deeper than 32 levels")

    def test_metadata_nested_deeper_than_a_request_body_is_refused(self) -> None:
        path = self.write(self.memory(metadata=_deep(200)))
        self.refused(path, r"line 2: memory\.metadata\.in.*nests deeper than 32 levels")
        # As deep as a body may hold it, it is taken.
        call_command(
            "import_project", str(self.write(self.memory(metadata=_deep(31)))),
            org="neworg", project="target", check=True, verbosity=0,
        )  # fmt: skip

    def test_metadata_that_is_not_an_object_is_refused(self) -> None:
        path = self.write(self.memory(metadata="a string"))
        self.refused(path, "line 2: memory metadata: must be a JSON object")
        scoped = self.write(self.memory(metadata={"user_id": "bob"}))
        self.refused(scoped, "'user_id' is a scope id and cannot be set through metadata")

    def test_a_text_longer_than_the_api_takes_is_refused(self) -> None:
        limit = django_settings.ENGRAM_MAX_TEXT_CHARS
        path = self.write(self.memory(text="a" * (limit + 1)))
        self.refused(path, f"memory text: is {limit + 1} characters; the limit is {limit}")
        metadata = self.write(self.memory(metadata={"note": "a" * limit}))
        self.refused(metadata, "memory metadata: is .* characters of JSON")

    def test_a_scope_id_no_add_takes_is_refused(self) -> None:
        self.refused(self.write(self.memory(user_id="..")), "memory user_id: must not be '..'")
        self.refused(self.write(self.memory(user_id=None)), "a memory needs a user_id")

    def test_a_moment_outside_the_years_the_api_takes_is_refused(self) -> None:
        for moment in (10**30, "1e30", "+1000000000000000000000000000000-01-01T00:00:00+00:00"):
            self.refused(self.write(self.memory(created_at=moment)), "2: memory created_at")
        # A valid ISO time whose UTC date is in year 10000.
        late = self.memory(created_at="9999-12-31T23:59:59-15:00")
        self.refused(self.write(late), "outside years 1-9999 in UTC")

    def test_a_one_megabyte_entity_name_is_refused_by_the_check_as_by_the_import(self) -> None:
        path = self.write(_entity(1, "a" * 2**20), self.memory())
        message = f"line 2: entity name: Ensure this field has no more than {MAX_NAME} characters"
        self.refused(path, message, check=True)
        self.refused(path, message)

    def test_the_check_writes_the_graph_so_the_database_refuses_there_as_on_import(self) -> None:
        """What the rules do not know the database may: the check's dry run writes the graph
        too (rolled back), so a refusal of the database is the check's as well as the import's,
        and a format error either way. Here the index of entity names, behind the rules' own
        limit of MAX_NAME characters."""
        project = make_key("acme", "dry").key.project
        name = "".join(random.Random(47).choices(string.ascii_lowercase, k=100_000))
        target = transfer_actions.Target(project.pk, 384, dry_run=True)
        with pytest.raises(FormatError, match="the database refuses one of these entity records"):
            transfer_actions.do_import_batch(target, "entity", [_entity(1, name)])

    def test_the_source_projects_settings_are_taken_by_the_projects_apis_rules(self) -> None:
        path = self.write(self.memory())
        lines = path.read_text().splitlines()
        header = json.loads(lines[0])
        header["project"]["custom_instructions"] = "a" * (django_settings.ENGRAM_MAX_TEXT_CHARS + 1)
        path.write_text("\n".join([json.dumps(header), *lines[1:]]))
        self.refused(path, "the header's project custom_instructions: is .* characters")
