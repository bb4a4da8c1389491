"""Search's keyword signal is BM25 over the scope being searched (issue #14): a word's weight
comes from how many of the scope's memories have it, so a word every memory has (the speaker's
name) counts little and a rare one a lot. The SQL (memory.retrieval.search.KEYWORD_CTES) is
checked against the formula computed here from the stored tsvectors."""

from __future__ import annotations

import math
from typing import Any
from unittest import mock

from django.db import connection
from django.test import override_settings
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase as HypothesisTestCase

from memory.models import Memory
from memory.queries import scope_memories
from memory.retrieval import search
from memory.retrieval.scoring import BM25_B, BM25_K1, bounded_keyword
from memory.retrieval.search import LEXEME_QUERY, hybrid_search
from memory.text.language import detect
from memory.text.query import analyse
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts

# No repeated word within a text: each word of a memory's own text has term frequency 1.
ALICE_TEXTS = [
    "Caroline went hiking in the mountains",
    "Caroline adopted a rescue puppy",
    "Caroline painted a sunrise over the lake",
    "Caroline joined a pottery class downtown",
    "Melanie bought pottery glaze yesterday",
]
# Another user's memories repeat the query's words: they must not change alice's statistics.
BOB_TEXTS = ["pottery wheel", "pottery kiln", "pottery studio", "Caroline pottery fair"]
QUERY = "Caroline pottery lessons"


def scope_of(user: str) -> dict[str, str | None]:
    return {"user_id": user, "agent_id": None, "app_id": None, "run_id": None}


# Each text its own conversation (no neighbours' words): the gap is 0.
@override_settings(ENGRAM_CONVERSATION_GAP_SECONDS=0)
class KeywordSignalTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.project = self.alice.key.project
        with project_context(self.project.pk):
            for text in ALICE_TEXTS:
                add_texts(self.project, [text], user_id="alice")
            for text in BOB_TEXTS:
                add_texts(self.project, [text], user_id="bob")

    def keyword_signals(self, query: str) -> dict[str, float]:
        with project_context(self.project.pk):
            hits = hybrid_search(
                scope_memories(self.project.pk, scope_of("alice")).active(),
                analyse(query), top_k=20, threshold=0,
            )  # fmt: skip
        return {h.memory.text: h.score.bm25 for h in hits}

    def expected(self, query: str) -> dict[str, float]:
        """BM25 / the query words' summed IDF, from the stored tsvectors (tf 1 per word)."""
        with project_context(self.project.pk), connection.cursor() as cursor:
            cursor.execute(
                "SELECT text, tsvector_to_array(search_vector), length(search_vector) "
                "FROM memory_memory WHERE user_id = 'alice' AND state = 'active'"
            )
            docs = {text: (set(words), size) for text, words, size in cursor.fetchall()}
            cursor.execute(
                "SELECT tsvector_to_array(to_tsvector(engram_text_config(%s), "
                "engram_keyword_text(%s)))",
                [detect(query), query],
            )
            terms = cursor.fetchone()[0]
        n = len(docs)
        df = {t: sum(t in words for words, _ in docs.values()) for t in terms}
        idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in terms}
        mean = sum(size for _, size in docs.values()) / n
        scores: dict[str, float] = {}
        for text, (words, size) in docs.items():
            norm = BM25_K1 * (1 - BM25_B + BM25_B * size / mean)
            bm25 = sum(idf[t] * (BM25_K1 + 1) / (1 + norm) for t in terms if t in words)
            scores[text] = bounded_keyword(bm25 / sum(idf.values()))
        return scores

    def test_the_keyword_signal_is_bm25_over_the_scope(self) -> None:
        got = self.keyword_signals(QUERY)
        expected = self.expected(QUERY)
        assert set(got) == set(ALICE_TEXTS)  # bob's memories are never candidates
        for text, value in got.items():
            assert math.isclose(value, expected[text], abs_tol=1e-6), (text, value)
        # "lessons" is in no memory and counts in the summed IDF: nothing scores the maximum.
        assert max(got.values()) < bounded_keyword(BM25_K1 + 1)

    def test_a_rare_word_outweighs_one_every_memory_has(self) -> None:
        got = self.keyword_signals(QUERY)
        # One query word each: "pottery" (2 of alice's 5 memories) against "caroline" (4 of 5).
        assert (
            got["Melanie bought pottery glaze yesterday"] > got["Caroline adopted a rescue puppy"]
        )
        # Both words beat either, and the memory with both ranks first.
        both = got["Caroline joined a pottery class downtown"]
        assert both == max(got.values()) > got["Melanie bought pottery glaze yesterday"]

    def test_another_scopes_memories_do_not_change_the_statistics(self) -> None:
        before = self.keyword_signals(QUERY)
        with project_context(self.project.pk):
            add_texts(self.project, ["Caroline pottery " * 3 + "lessons"], user_id="carol")
            Memory.objects.filter(user_id="bob").update(text="Caroline lessons pottery")
        assert self.keyword_signals(QUERY) == before

    def test_a_query_without_a_word_to_match_has_no_keyword_signal(self) -> None:
        for query in ("the and of", "!!! ???", "🙂"):
            got = self.keyword_signals(query)
            assert all(value == 0.0 for value in got.values()), query


class LexemeQueryTestCase(HypothesisTestCase):
    @hypothesis_settings(max_examples=60, deadline=None)
    @given(st.text(max_size=200))
    def test_every_word_of_a_text_is_matched_by_its_one_word_query(self, text: str) -> None:
        """The query of one lexeme (quotes and backslashes escaped) parses for any lexeme
        Postgres makes, and matches the text it came from."""
        text = text.replace("\x00", "")
        document = "to_tsvector(engram_text_config(%s), engram_keyword_text(%s))"
        sql = (
            f"SELECT t.lexeme, {document} @@ {LEXEME_QUERY.format('t.lexeme')} "  # noqa: S608
            f"FROM unnest(tsvector_to_array({document})) AS t(lexeme)"
        )
        language = detect(text)
        with connection.cursor() as cursor:
            cursor.execute(sql, [language, text, language, text])
            rows: list[tuple[str, Any]] = cursor.fetchall()
        assert all(matched for _, matched in rows), rows


class LargeScopeTestCase(BaseTestCase):
    """From FREQUENT_FROM memories on, a word more than a quarter of the scope has is not matched
    on; above KEYWORD_SAMPLE memories the statistics come from a sample (both patched down
    here)."""

    def setUp(self) -> None:
        super().setUp()
        self.project = self.alice.key.project
        with project_context(self.project.pk):
            add_texts(
                self.project,
                [f"Caroline {word}" for word in ("hiking", "puppy", "sunrise", "lake", "pottery")],
                user_id="dana",
            )

    def matched(self, query: str) -> set[str]:
        """The keyword matches, the same through the index path's scan of the scope and the
        exact path's single pass (search.SCOPE_PASS)."""
        found = []
        with project_context(self.project.pk):
            scope = search._scope_where(scope_memories(self.project.pk, scope_of("dana")).active())
            for vector in (None, analyse(query).vector):
                ctes, params = search._keyword_ctes(scope, (detect(query), query), vector)
                with connection.cursor() as cursor:
                    cursor.execute(
                        f"WITH {ctes} SELECT m.text FROM keyword_matches k "  # noqa: S608
                        "JOIN memory_memory m ON m.id = k.id",
                        params,
                    )
                    found.append({text for (text,) in cursor.fetchall()})
        scan, single_pass = found
        assert scan == single_pass
        return single_pass

    def test_a_small_scope_is_matched_on_every_word(self) -> None:
        assert len(self.matched("Caroline pottery")) == 5
        with mock.patch.object(search, "FREQUENT_FROM", 6):  # one more than the scope has
            assert len(self.matched("Caroline pottery")) == 5

    def test_a_scope_below_the_sample_is_not_matched_on_its_frequent_words(self) -> None:
        # Three more memories, each its own conversation: 8 in all, "caroline" in 5 of them
        # (frequent), "pottery" in 2 (its own and the previous message's context: not).
        with override_settings(ENGRAM_CONVERSATION_GAP_SECONDS=0), project_context(self.project.pk):
            for word in ("jogging", "reading", "cooking"):
                add_texts(self.project, [f"Melanie {word}"], user_id="dana")
        assert len(self.matched("Caroline pottery")) == 5  # 8 memories: below FREQUENT_FROM
        with mock.patch.object(search, "FREQUENT_FROM", 8):
            assert self.matched("Caroline pottery") == {"Caroline pottery", "Caroline lake"}
            assert len(self.matched("Caroline")) == 5  # every query word is frequent

    def test_a_large_scopes_frequent_word_is_not_matched_on(self) -> None:
        # Four more memories, each its own conversation: 9 in all, "caroline" in every one,
        # "pottery" in 2 (its own and the previous message's context). The statistics come from
        # a sample of 8, whichever 8 the scan gives: "caroline" is in more than a quarter of
        # them, "pottery" in 2 at most, not more.
        with override_settings(ENGRAM_CONVERSATION_GAP_SECONDS=0), project_context(self.project.pk):
            for word in ("garden", "chess", "river", "music"):
                add_texts(self.project, [f"Caroline {word}"], user_id="dana")
        with (
            mock.patch.object(search, "KEYWORD_SAMPLE", 8),
            mock.patch.object(search, "FREQUENT_FROM", 4),
        ):
            # "pottery", and the message before it, whose keyword context has the word.
            assert self.matched("Caroline pottery") == {"Caroline pottery", "Caroline lake"}
            # Unless every query word is that frequent.
            assert len(self.matched("Caroline")) == 9
            with project_context(self.project.pk):
                hits = hybrid_search(
                    scope_memories(self.project.pk, scope_of("dana")).active(),
                    analyse("Caroline pottery"), top_k=5, threshold=0,
                )  # fmt: skip
        # The word still counts in its matches' scores: the memory with both words first; the
        # others (semantic candidates here) have no keyword signal but the one whose context
        # has "pottery".
        assert hits[0].memory.text == "Caroline pottery"
        signals = {h.memory.text: h.score.bm25 for h in hits}
        assert signals["Caroline pottery"] > signals["Caroline lake"] > 0
        assert [t for t, v in signals.items() if v == 0] == [
            t for t in signals if t not in ("Caroline pottery", "Caroline lake")
        ]


class KeywordIndexTestCase(BaseTestCase):
    """The keyword documents have no index (memory migration 0029): every application query is
    under row-level security, and PostgreSQL uses a condition as an index condition ahead of a
    policy only when its function is leakproof, which `@@` is not."""

    def test_the_match_operator_is_not_leakproof(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT DISTINCT p.proleakproof FROM pg_operator o "
                "JOIN pg_proc p ON p.oid = o.oprcode "
                "WHERE o.oprname = '@@' AND o.oprleft = 'tsvector'::regtype"
            )
            assert cursor.fetchall() == [(False,)]

    def test_no_index_covers_the_keyword_documents(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT indexname FROM pg_indexes "
                "WHERE tablename = 'memory_memory' AND indexdef LIKE '%%search_vector%%'"
            )
            assert cursor.fetchall() == []
