"""Entity linking of every stored memory (the worker's link_entities) and search's entity signal."""

from __future__ import annotations

import io
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any
from unittest import mock

import dramatiq
import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import Q

from memory import actions, graph, jobs, queries
from memory.extraction.tasks import link_entities
from memory.graph import Scope
from memory.models import EntityVector, Memory, MemoryEntity
from memory.retrieval import scoring, search
from memory.retrieval.scoring import FEATURES, Signals, entity_strengths, features, fuse
from memory.text import query as query_analysis
from memory.text.embeddings import OnnxSentenceModel, embed, embed_words, get_embedder
from memory.text.query import analyse
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, auth, make_key
from tests.memory.test_events import start_worker, stop, wait_for

ALICE = Scope(user_id="alice")


def links(project_id: uuid.UUID, memory_id: Any = None) -> set[str]:
    with project_context(project_id):
        rows = MemoryEntity.objects.all()
        if memory_id is not None:
            rows = rows.filter(memory_id=memory_id)
        return set(rows.values_list("entity_name", flat=True))


class LinkingTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.project_id = self.alice.key.project_id

    def test_it_links_names_titles_acronyms_and_the_self_entity(self) -> None:
        (memory,) = add_texts(
            self.alice.key.project,
            ['I met Caroline at the Louvre in Paris; we talked about NASA and "Dune".'],
            user_id="alice",
        )
        made = graph.link_mentions(self.project_id, [memory.pk])
        expected = {"caroline", "louvre", "paris", "nasa", "dune", "alice"}
        assert links(self.project_id, memory.pk) == expected
        assert made == len(expected)
        entity = graph.find_entity(self.project_id, ALICE, "Caroline")
        assert entity is not None and (entity.display_name, entity.mentions) == ("Caroline", 1)

    def test_a_rerun_links_nothing_twice(self) -> None:
        memories = add_texts(
            self.alice.key.project, ["Jon moved to Berlin", "Berlin is cold"], user_id="alice"
        )
        ids = [str(m.pk) for m in memories]
        link_entities(str(self.project_id), ids)
        with project_context(self.project_id):
            before = sorted(MemoryEntity.objects.values_list("memory_id", "entity_name"))
        assert graph.link_mentions(self.project_id, ids) == 0
        link_entities(str(self.project_id), ids)
        with project_context(self.project_id):
            after = sorted(MemoryEntity.objects.values_list("memory_id", "entity_name"))
        assert after == before
        # "Berlin" starts the second text: found there as a known name of the scope.
        assert links(self.project_id, memories[1].pk) == {"berlin"}
        berlin = graph.find_entity(self.project_id, ALICE, "berlin")
        assert berlin is not None and berlin.mentions == 2

    def test_a_chunk_counts_each_memorys_mention_once_in_its_own_scope(self) -> None:
        # One job, two scopes naming Oslo: each scope's entity counts its own memories' mentions
        # (upserted once per chunk), a memory already linked counts nothing more.
        project = self.alice.key.project
        (first,) = add_texts(project, ["Jon flew to Oslo"], user_id="alice")
        graph.link_mentions(self.project_id, [first.pk])
        more = add_texts(project, ["Oslo was cold", "The food in Oslo was good"], user_id="alice")
        bobs = add_texts(project, ["Oslo again, Oslo forever"], user_id="bob")
        ids = [first.pk, *(m.pk for m in more), *(m.pk for m in bobs)]
        assert graph.link_mentions(self.project_id, ids) == 3  # two of alice's, one of bob's
        oslo = graph.find_entity(self.project_id, ALICE, "Oslo")
        bob_oslo = graph.find_entity(self.project_id, Scope(user_id="bob"), "Oslo")
        assert oslo is not None and oslo.mentions == 3
        assert bob_oslo is not None and bob_oslo.mentions == 1 and bob_oslo.id != oslo.id
        assert all("oslo" in links(self.project_id, m) for m in ids)

    def test_only_active_memories_of_the_project_are_linked(self) -> None:
        (mine,) = add_texts(self.alice.key.project, ["Jon likes Oslo"], user_id="alice")
        (theirs,) = add_texts(self.charlie.key.project, ["Jon likes Oslo"], user_id="alice")
        with project_context(self.project_id):
            Memory.objects.filter(pk=mine.pk).update(state=Memory.State.DELETED)
        # Alice's job naming Charlie's memory, and her own deleted one: nothing to link.
        assert graph.link_mentions(self.project_id, [mine.pk, theirs.pk]) == 0
        assert links(self.project_id) == set() and links(self.charlie.key.project_id) == set()

    def test_a_message_that_cannot_work_ends_without_linking(self) -> None:
        (memory,) = add_texts(self.alice.key.project, ["Jon likes Oslo"], user_id="alice")
        for args in (("not-a-uuid", [str(memory.pk)]), (str(self.project_id), ["nope", 3])):
            assert link_entities(*args) is None
        assert link_entities(str(self.project_id), None) is None  # type: ignore[arg-type]
        assert links(self.project_id) == set()
        assert link_entities.options["max_retries"] == 2

    def test_adds_and_text_updates_schedule_linking_after_commit(self) -> None:
        with (
            mock.patch.object(jobs.LINK_ENTITIES, "send") as send,
            self.captureOnCommitCallbacks(execute=True),
        ):
            body = {"messages": "Jon likes Oslo", "user_id": "alice", "infer": False}
            memory_id = self.call("post", "/v3/memories/add/", body).json()["results"][0]["id"]
        send.assert_called_once_with(str(self.project_id), [memory_id])
        with (
            mock.patch.object(jobs.LINK_ENTITIES, "send") as send,
            self.captureOnCommitCallbacks(execute=True),
        ):
            self.call("put", f"/v1/memories/{memory_id}/", {"metadata": {"k": 1}})
            assert not send.called  # metadata only: the text and its entities are unchanged
            self.call("put", f"/v1/memories/{memory_id}/", {"text": "Jon likes Lima"})
        send.assert_called_once_with(str(self.project_id), [memory_id])


@contextmanager
def entity_weight(weight: float) -> Iterator[None]:
    """Search with the bundled ranker, its two entity features weighed `weight` (0: off)."""
    base = scoring.ranker_for(scoring.DEFAULT_RANKER)
    weights = list(base.ranker)
    for name in ("entity", "entity_similar"):
        weights[FEATURES.index(name)] = weight
    ranker = replace(base, ranker=tuple(weights))
    with mock.patch.object(search, "ranker_for", lambda model: ranker):
        yield


class SignalTestCase(BaseTestCase):
    QUERY = "What music does Jon like?"

    def setUp(self) -> None:
        self.project_id = self.alice.key.project_id
        self.plain, self.linked = add_texts(
            self.alice.key.project,
            ["The neighbour likes jazz music", "Plays the violin every evening"],
            user_id="alice",
        )
        # As extraction links a memory whose text says "he": the memory is about Jon.
        graph.link_memory(self.project_id, self.linked.pk, [("Jon", "person")])

    def search(self, who: Any = None) -> list[dict[str, Any]]:
        body = {"query": self.QUERY, "filters": {"user_id": "alice"}, "threshold": 0}
        response = self.call("post", "/v3/memories/search/", body, who=who)
        assert response.status_code == 200, response.content
        return list(response.json()["results"])

    def test_a_memory_linked_to_the_querys_entity_ranks_higher_with_the_signal(self) -> None:
        with entity_weight(0):
            off = self.search()
        assert [r["id"] for r in off] == [str(self.plain.pk), str(self.linked.pk)]
        with entity_weight(20):
            on = self.search()
        assert [r["id"] for r in on] == [str(self.linked.pk), str(self.plain.pk)]
        # The signal is the same either way; its weight is the ranker's.
        assert [r["score_breakdown"]["entity"] for r in on] == [1.0, 0.0]
        assert [r["score_breakdown"]["entity"] for r in off] == [0.0, 1.0]
        # The other signals are what they were.
        before = {r["id"]: r["score_breakdown"]["semantic"] for r in off}
        assert {r["id"]: r["score_breakdown"]["semantic"] for r in on} == before

    def test_lower_case_known_entities_match_the_query_words(self) -> None:
        graph.link_memory(self.project_id, self.plain.pk, ["jazz music"])
        self.QUERY = "any jazz music"
        with entity_weight(1):
            results = self.search()
        breakdown = {r["id"]: r["score_breakdown"]["entity"] for r in results}
        assert breakdown == {str(self.plain.pk): 1.0, str(self.linked.pk): 0.0}

    def test_another_projects_entities_never_boost_a_search(self) -> None:
        (theirs,) = add_texts(
            self.charlie.key.project, ["Plays the violin every evening"], user_id="alice"
        )
        graph.link_memory(self.charlie.key.project_id, theirs.pk, ["Jon"])
        with project_context(self.project_id):
            MemoryEntity.objects.all().delete()  # Alice's own link gone: only Charlie's remains
        with entity_weight(1):
            results = self.search()
            theirs_seen = self.search(who=self.charlie)
        assert {r["id"] for r in results} == {str(self.plain.pk), str(self.linked.pk)}
        assert all(r["score_breakdown"]["entity"] == 0 for r in results)
        assert [(r["id"], r["score_breakdown"]["entity"]) for r in theirs_seen] == [
            (str(theirs.pk), 1.0)
        ]

    def test_hostile_queries_are_only_parameters(self) -> None:
        for query in (
            "$$ }) DETACH DELETE n //",
            "'); DROP TABLE memory_memoryentity; --",
            "Zürich 東京 " * 300,
        ):
            self.QUERY = query
            with entity_weight(1):
                self.search()
        assert links(self.project_id) == {"jon"}


def vectors(project_id: uuid.UUID) -> dict[tuple[str | None, str], list[float]]:
    with project_context(project_id):
        return {
            (v.user_id, v.entity_name): list(v.embedding)
            for v in EntityVector.objects.order_by("id")
        }


class MatchingByMeaningTestCase(BaseTestCase):
    """A scope's entity names have vectors, and search matches the query's words to them."""

    def setUp(self) -> None:
        self.project_id = self.alice.key.project_id
        self.rome, self.jazz = add_texts(
            self.alice.key.project,
            ["We had pizza in Rome", "The neighbour plays jazz every evening"],
            user_id="alice",
        )
        graph.link_mentions(self.project_id, [self.rome.pk, self.jazz.pk])

    def search(self, query: str, filters: dict[str, Any] | None = None) -> dict[str, float]:
        body = {"query": query, "filters": filters or {"user_id": "alice"}, "threshold": 0}
        response = self.call("post", "/v3/memories/search/", body)
        assert response.status_code == 200, response.content
        return {r["id"]: r["score_breakdown"]["entity"] for r in response.json()["results"]}

    def test_each_linked_name_of_a_scope_gets_one_vector(self) -> None:
        stored = vectors(self.project_id)
        assert set(stored) == {("alice", "rome")}
        assert stored[("alice", "rome")] == pytest.approx(embed(["rome"])[0], abs=1e-6)
        # Another scope naming it gets its own; linking again makes none.
        (bobs,) = add_texts(self.alice.key.project, ["We saw Rome in May"], user_id="bob")
        graph.link_mentions(self.project_id, [bobs.pk, self.rome.pk])
        assert set(vectors(self.project_id)) == {("alice", "rome"), ("bob", "rome")}

    def test_a_query_word_close_in_meaning_to_an_entity_counts(self) -> None:
        rome, jazz = str(self.rome.pk), str(self.jazz.pk)
        # "cities" names no entity; "rome" is close to it in meaning (cosine about 0.55).
        found = self.search("Which cities did she see?")
        assert found == {rome: pytest.approx(1.0), jazz: 0.0}
        with mock.patch.object(search, "ENTITY_SIMILARITY", 0.9):
            assert self.search("Which cities did she see?") == {rome: 0.0, jazz: 0.0}
        # A name the query says counts in full.
        assert self.search("pizza in Rome?")[rome] == pytest.approx(1.0)

    def test_only_words_of_the_models_vocabulary_are_matched_by_meaning(self) -> None:
        """A word outside the local model's vocabulary would cost a model run on the request
        path: it is not matched by meaning (a vocabulary word still is, looked up)."""
        rome = str(self.rome.pk)
        embedder = get_embedder()
        assert isinstance(embedder, OnnxSentenceModel)
        with (
            mock.patch.object(query_analysis, "_word_cache", OrderedDict()),
            mock.patch(f"{query_analysis.__name__}.embed_words", wraps=embed_words) as looked_up,
            mock.patch.object(embedder, "embed", wraps=embedder.embed) as model,
            mock.patch.object(embedder, "embed_query", wraps=embedder.embed_query) as query_model,
        ):
            found = self.search("Which cities did the zorblaxes see?")
        assert found[rome] == pytest.approx(1.0)
        assert [list(c.args[0]) for c in looked_up.call_args_list] == [["cities"]]
        # The model ran once, for the query itself; no word was embedded.
        assert [c.args[0] for c in query_model.call_args_list] == [
            "Which cities did the zorblaxes see?"
        ]
        assert model.call_args_list == []

    def test_only_a_pinned_scope_is_matched_by_meaning(self) -> None:
        # No scope id pinned (any user): the project's every name would be compared, so none is.
        found = self.search("Which cities did she see?", {"user_id": "*"})
        assert set(found.values()) == {0.0}
        # Another user's names never count for this one.
        (bobs,) = add_texts(self.alice.key.project, ["Trip to Paris"], user_id="bob")
        graph.link_mentions(self.project_id, [bobs.pk])
        with project_context(self.project_id):
            MemoryEntity.objects.filter(user_id="alice").delete()
        assert set(self.search("Which cities did she see?").values()) == {0.0}

    def test_the_names_query_filters_on_the_project_itself(self) -> None:
        """The first wall: the names matched by meaning are the searched project's by the
        query's own filter, not by row-level security alone. Built for this project and run in
        another one's context (where RLS shows only that one's rows), it finds nothing, while
        the other project's "alice" has the same name."""
        other = self.charlie.key.project_id
        (theirs,) = add_texts(self.charlie.key.project, ["We had pizza in Rome"], user_id="alice")
        graph.link_mentions(other, [theirs.pk])
        assert set(vectors(other)) == {("alice", "rome")}

        def names(built_for: uuid.UUID, run_in: uuid.UUID) -> list[str]:
            scoped = queries.matching(built_for, Q(user_id="alice"))
            found = search._similar_names(search.pinned_scope(scoped), analyse("Which cities?"), [])
            assert found is not None
            ctes, params = search._similar_ctes(*found)
            with project_context(run_in), connection.cursor() as cursor:
                statement = f"WITH {ctes} SELECT entity_name FROM {search.SIMILAR_CTE}"  # noqa: S608
                cursor.execute(statement, params)
                return [name for (name,) in cursor.fetchall()]

        assert names(self.project_id, self.project_id) == ["rome"]
        assert names(other, other) == ["rome"]
        assert names(self.project_id, other) == []
        # No project pinned (a queryset of every project's memories): nothing is matched.
        assert search._similar_names({"user_id": "alice"}, analyse("Which cities?"), []) is None

    def test_the_last_link_of_a_name_takes_its_vector_with_it(self) -> None:
        (again,) = add_texts(self.alice.key.project, ["Rome again in June"], user_id="alice")
        graph.link_mentions(self.project_id, [again.pk])
        actions.do_redact_memory(self.rome, actor="command:test")
        assert ("alice", "rome") in vectors(self.project_id)  # June still names it
        with project_context(self.project_id):
            again.refresh_from_db()
        actions.do_redact_memory(again, actor="command:test")
        assert vectors(self.project_id) == {}

    def test_the_backfill_embeds_the_names_linked_without_a_vector(self) -> None:
        with project_context(self.project_id):
            EntityVector.objects.all().delete()  # as linked before vectors existed
        out = io.StringIO()
        call_command("embed_entity_names", stdout=out)
        assert "embedded 1 entity names" in out.getvalue()
        assert set(vectors(self.project_id)) == {("alice", "rome")}
        call_command("embed_entity_names", stdout=out)
        assert out.getvalue().endswith("embedded 0 entity names\n")

    def test_erasing_the_user_erases_the_vectors_of_the_users_names(self) -> None:
        (bobs,) = add_texts(self.alice.key.project, ["We saw Rome in May"], user_id="bob")
        graph.link_mentions(self.project_id, [bobs.pk])
        actions.do_erase_user(self.project_id, "alice", actor="command:test")
        assert set(vectors(self.project_id)) == {("bob", "rome")}


def test_names_matched_by_meaning_are_a_feature_of_their_own() -> None:
    named = Signals(0.5, 0.0, entities=("rome",))
    similar = Signals(0.5, 0.0, entities=("paris",))
    # Each name is carried by one of two: rarity 1, over the names of its kind the candidates
    # carry. The query says "rome"; "paris" was matched by meaning.
    rows = features([named, similar], frozenset({"rome"}))
    entity, by_meaning = FEATURES.index("entity"), FEATURES.index("entity_similar")
    assert [(r[entity], r[by_meaning]) for r in rows] == [(1.0, 0.0), (0.0, 1.0)]
    assert entity_strengths([named, similar]) == [pytest.approx(0.5), pytest.approx(0.5)]
    # How much each counts is the fitted ranker's: both raise a memory above one with neither.
    ranker = scoring.ranker_for(scoring.DEFAULT_RANKER)
    scores = fuse([named, similar, Signals(0.5, 0.0)], ranker, names=frozenset({"rome"}))
    assert min(scores[0].relevance, scores[1].relevance) > scores[2].relevance


def test_rarer_entities_count_more() -> None:
    everyone = Signals(0.5, 0.0, entities=("caroline",))
    rare = Signals(0.5, 0.0, entities=("caroline", "louvre"))
    none = Signals(0.5, 0.0)
    strengths = entity_strengths([everyone, rare, everyone, none])
    assert strengths[1] > strengths[0] == strengths[2] > strengths[3] == 0
    scores = fuse([everyone, rare, none], scoring.ranker_for(scoring.DEFAULT_RANKER))
    assert scores[1].score > scores[0].score > scores[2].score
    # caroline: carried by 2 of 3, log(1 + 3/2) / log(4); louvre: by 1 of 3, 1; averaged over 2.
    caroline = math.log(2.5) / math.log(4)
    assert scores[0].entity == pytest.approx(caroline / 2)
    assert scores[1].entity == pytest.approx((caroline + 1) / 2)
    assert scores[2].entity == 0
    # Without links, the same memories score alike.
    plain = fuse([none, none, none], scoring.ranker_for(scoring.DEFAULT_RANKER))
    assert all(s.entity == 0 for s in plain) and len({s.score for s in plain}) == 1


def test_a_raw_add_is_linked_by_a_real_worker(committed_db: None, client: Any) -> None:
    key = make_key("acme", "linking")
    body = {"messages": "I met Caroline at the Louvre", "user_id": "alice", "infer": False}
    response = client.post(
        "/v3/memories/add/", body, content_type="application/json", headers=auth(key.raw)
    )
    memory_id = response.json()["results"][0]["id"]
    worker = start_worker()
    try:
        linked = wait_for(lambda: len(links(key.key.project_id, memory_id)) == 3, seconds=60)
    finally:
        stop(worker)
    assert linked, links(key.key.project_id, memory_id)
    assert links(key.key.project_id, memory_id) == {"caroline", "louvre", "alice"}
    entity = graph.find_entity(key.key.project_id, ALICE, "louvre")
    assert entity is not None and entity.mentions == 1


def test_a_failing_job_is_retried_twice_then_ends(committed_db: None) -> None:
    """Through the real broker and a worker thread: a job that fails every time ends."""
    project = make_key("acme", "failing").key.project
    calls: list[float] = []

    def fail(*args: Any) -> None:
        calls.append(time.monotonic())
        raise RuntimeError("the graph is down")

    broker = dramatiq.get_broker()
    with mock.patch.object(graph, "link_mentions", fail):
        message = link_entities.send_with_options(
            args=(str(project.pk), [str(uuid.uuid4())]), min_backoff=10, max_backoff=100
        )
        worker = dramatiq.Worker(broker, queues={"entities"}, worker_threads=1, worker_timeout=100)
        worker.start()
        try:
            assert wait_for(lambda: len(calls) == 3 and not _open(message.message_id), 60)
            time.sleep(1)  # nothing more comes
        finally:
            worker.stop()
    assert len(calls) == 3


def _open(message_id: str) -> bool:
    """Whether the queue still holds the message to be (re)delivered."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM dramatiq.queue WHERE message_id = %s "
            "AND state IN ('queued', 'consumed')",
            [message_id],
        )
        row = cursor.fetchone()
    return bool(row and row[0])
