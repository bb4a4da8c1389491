"""Hybrid search: semantic and keyword candidates gathered and scored in one SQL statement.

The statement has two or three candidate subqueries over the caller's (already scoped and
filtered) queryset, so all see the same project, scope and filters, and row-level security
applies:

- semantic: the n closest by embedding <=> query. A search bounded to its scopes ranks exactly:
  one pass over the scope (SCOPE_PASS) gives every row's distance, and a large scope's keyword
  matches with it; a wider one lets the planner walk the HNSW index, with hnsw.iterative_scan
  (set per connection in settings) so a filter cannot starve the results;
- keyword: the memories with a word of the query (its stems in the query's language, OR-ed:
  memory.text.language) in the weighted tsvector, ranked by BM25 over the scope (scoring
  explains the formula). CTEs work out each query word's IDF from the scope (KEYWORD_CTES),
  find the matches once and score them; the candidates are the best of them, and every
  candidate's keyword column is its score there (0 for a candidate that has no query word);
- window (when the query names a time window: memory.text.temporal): the scope's memories
  whose event time (created_at) falls in it, closest in meaning first.

Every candidate also gets an entity signal (a feature of the fitted ranker: scoring): the names the
query may mean that it is linked to (MemoryEntity). The names are the query's analysis
(memory.text.query): what the local recogniser finds in it (recognise.query_names) and every run of
up to three of its words: the database matches them against the scope's own entity names
(normalised) by the index, so an entity known in lower case ("python") counts as much as a
capitalised name.

The scope's entity names are also matched by meaning (only when the filters pin a scope id): the
query's words that are not part of a name it says (recognise.query_words) and that the local
model's vocabulary has get their vectors (looked up: a word outside it, "rereading", would cost a
model run of about 1 ms, and on LoCoMo leaving those out ranked the same, at 2.6 ms less for the
slowest 5 % of searches), and the scope's names whose vectors (EntityVector) have at least
ENTITY_SIMILARITY cosine similarity to one of them count too, as a feature of their own
(scoring.FEATURES' entity_similar, which the fit weighs). A CTE finds them once.

The outer query computes every signal for every candidate (for the entity signal, the query's
names each candidate is linked to); scoring.fuse() combines them through the fitted ranker.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import EmptyResultSet, FullResultSet
from django.db.models import QuerySet
from django.db.models.expressions import Col, RawSQL
from django.db.models.lookups import Exact, In
from django.db.models.sql.where import AND, OR, WhereNode

from config import metrics
from memory.models import (
    SCOPE_FIELDS,
    EntityVector,
    Memory,
    MemoryQuerySet,
)
from memory.retrieval.scoring import (
    BM25_B,
    BM25_K1,
    TERM_WEIGHTS,
    Score,
    Signals,
    fuse,
    ranker_for,
)
from memory.text.query import Query
from memory.text.temporal import Window
from tenants.replica import fetch_all

# Each signal's best this many (or top_k, if more) are candidates. On LoCoMo (bench/locomo.py)
# 30 ranks as 50 did (recall@10 0.779 against 0.780, MRR 0.596 against 0.594; 25 and 100 within
# 0.002 as well: what is missed ranks low in every signal) at 1.0 ms less per search (p95 1.3).
SEMANTIC_CANDIDATES = 30
KEYWORD_CANDIDATES = 30
WINDOW_CANDIDATES = 30
# A bound for very large scopes (bench/scale.py: a 31k-memory user): the window candidates are
# ranked among the newest WINDOW_ROWS memories of the window, not among all of them. Scopes below
# the bound rank exactly as without it. The same bound on the keyword matches (ranked newest
# first) sent the planner down the project's created_at index under a metadata filter: 2.3 s
# instead of 94 ms, so keyword matches are not bounded.
WINDOW_ROWS = 2000
# Entity names matched by meaning: a name whose vector has at least this cosine similarity to a
# word of the query counts (as scoring's entity_similar feature).
ENTITY_SIMILARITY = 0.5
# Entity names matched by meaning: at most this many, the closest to a query word first.
SIMILAR_NAMES = 20
# The CTE of the names matched by meaning, and the test of a link's name against it.
SIMILAR_CTE = "similar_names"
IN_SIMILAR = "{column} IN (SELECT s.entity_name FROM similar_names s)"
# The query words' vectors, a CTE of their own that the names' distance reads: the distance is
# both the names' filter and their order, and a parameter of it was sent, and parsed from text,
# twice (six words' vectors: 0.4 ms a copy; on LoCoMo's questions 0.2 ms less per search, mean).
WORDS_CTE = "query_word_vectors"
CLOSEST = f"(SELECT min(embedding <=> w.v) FROM {WORDS_CTE} w)"  # noqa: S608 (constants)
# How the search statement starts (benchmarks pick it out of the queries a request runs).
STATEMENT_STARTS = ("WITH keyword_terms ", f"WITH {WORDS_CTE} ")
# The query words matched and scored: its distinct lexemes, the first this many in alphabetical
# order (a 4,000-character query stays a bounded amount of work).
MAX_KEYWORD_TERMS = 64
# ts_rank weights for {D, C, B, A}: a memory's own words (A) count fully, the previous
# message's (B) half, the next one's (C) a quarter. ts_rank of a one-word query gives one
# occurrence w / 1.6449 (the Basel sum), more occurrences a little more: times RANK_SCALE, a
# weighted term frequency.
RANK_WEIGHTS = "{" + ", ".join(str(TERM_WEIGHTS[w]) for w in "DCBA") + "}"
RANK_SCALE = 1.64493406685
# A tsquery of one lexeme, quoted (quotes and backslashes doubled), so it matches as it is.
LEXEME_QUERY = r"""('''' || replace(replace({0}, '\', '\\'), '''', '''''') || '''')::tsquery"""


# BM25 over the scope, in the search statement's CTEs. Its statistics (size, mean length, each
# query word's document frequency) come from the scope's first KEYWORD_SAMPLE memories: exact
# below that size, an estimate above it. In a scope of FREQUENT_FROM memories or more, a query
# word more than FREQUENT_WORD of them (of the sample) have is not matched on, unless every
# query word is that frequent: such a word (the name of the speaker of half a conversation, "user")
# would make most of the scope keyword matches, each scored (a 31k-memory user asking about "the
# user": 210 ms instead of 80-90 ms); it still counts in the scores of the memories that match
# another word. On LoCoMo's 369-680-memory scopes applying it saved 0.9 ms per search and ranked
# as well (recall@10 0.781 against 0.779, MRR 0.596 both); below FREQUENT_FROM, where scoring
# every memory costs little, every word is matched. A query word no memory has counts in the
# summed IDF: matching half of what a query says scores lower. Each word's document frequency
# is counted in a CTE of its own (keyword_df): a subquery in FROM was pulled up into the three
# expressions reading it, and counted three times (3 ms of a 9-word query on a 629-memory scope;
# 0.5 ms p50 and 1.2 ms p95 less per LoCoMo search once counted once). <sample> and <matches>
# are the caller's queryset compiled by Django (scope, filters), <pass> the exact path's single
# pass over it (SCOPE_PASS) or nothing; every value is a parameter.
KEYWORD_SAMPLE = 2000
FREQUENT_WORD = 0.25
FREQUENT_FROM = 200
# A scope larger than the sample is matched on a scan of its own; a smaller one is the sample.
MATCHING = (
    "search_vector @@ (SELECT matching FROM keyword_query) AND (SELECT n FROM keyword_scope) >= %s"
)
# The tsvector as a value of its own: the CTEs read it several times per row, and reading it
# straight from the table's tuples cost half as much again (a 419-memory scope: 10 ms against 7).
DOCUMENT = "search_vector || ''::tsvector"
KEYWORD_CTES = f"""keyword_terms AS MATERIALIZED (
    SELECT t.lexeme, {LEXEME_QUERY.format("t.lexeme")} AS q
    FROM unnest(tsvector_to_array(to_tsvector(engram_text_config(%s), engram_keyword_text(%s))))
        AS t(lexeme)
    LIMIT {MAX_KEYWORD_TERMS}
), keyword_sample AS MATERIALIZED (<sample>
), keyword_scope AS MATERIALIZED (
    SELECT count(*) AS n, avg(length(document))::float8 AS mean FROM keyword_sample
), keyword_df AS MATERIALIZED (
    SELECT t.q, (SELECT count(*) FROM keyword_sample s WHERE s.document @@ t.q) AS df
    FROM keyword_terms t
), keyword_idf AS MATERIALIZED (
    SELECT d.q, ln(1 + (c.n - d.df + 0.5) / (d.df + 0.5))::float8 AS idf,
        c.n >= %s AND d.df > c.n * {FREQUENT_WORD} AS frequent
    FROM keyword_df d CROSS JOIN keyword_scope c
), keyword_query AS MATERIALIZED (
    SELECT sum(idf) AS total, coalesce(
        string_agg(q::text, ' | ') FILTER (WHERE NOT frequent), string_agg(q::text, ' | ')
    )::tsquery AS matching
    FROM keyword_idf
),<pass> keyword_matches AS MATERIALIZED (
    SELECT id, document FROM keyword_sample
    WHERE document @@ (SELECT matching FROM keyword_query) AND (SELECT n FROM keyword_scope) < %s
    UNION ALL <matches>
), keyword_scores AS MATERIALIZED (
    SELECT f.id AS memory_id, sum(
        f.idf * f.tf * {BM25_K1 + 1}
        / (f.tf + {BM25_K1} * (1 - {BM25_B} + {BM25_B} * f.size / c.mean))
    ) / q.total AS bm25
    FROM (
        SELECT m.id, i.idf, length(m.document) AS size,
            ts_rank('{RANK_WEIGHTS}', m.document, i.q) * {RANK_SCALE} AS tf
        FROM keyword_matches m JOIN keyword_idf i ON m.document @@ i.q
        OFFSET 0
    ) f CROSS JOIN keyword_scope c CROSS JOIN keyword_query q
    GROUP BY f.id, q.total
)"""  # noqa: S608 (fixed SQL text: constants; <sample> and <matches> are compiled by Django)
# The exact path reads the scope once for both signals: each row's distance to the query and,
# in a scope larger than the sample that matches a query word, its document (else NULL). The
# semantic candidates are the closest of these rows, the keyword matches the ones with a
# document. Two passes over a 21,683-memory scope (bench/scale.py's largest user) read each row
# twice, at about 2 µs a read: 137 ms against 101 ms for one (docs/benchmarks.md). In a smaller
# scope the keyword matches come from the sample, and the pass is the exact ranking's own scan.
SCOPE_PASS = f"""
scope_pass AS MATERIALIZED (
    SELECT id, embedding <=> %s::vector AS distance,
        CASE WHEN (SELECT n FROM keyword_scope) >= %s
            AND search_vector @@ (SELECT matching FROM keyword_query)
        THEN {DOCUMENT} END AS document
    FROM memory_memory WHERE <scope>
),"""  # noqa: S608 (fixed SQL text; <scope> is compiled by Django)
SCOPE_MATCHES = "SELECT id, document FROM scope_pass WHERE document IS NOT NULL"
SCOPE_CLOSEST = "SELECT id FROM scope_pass ORDER BY distance, id LIMIT %s"
# The statement's outer query: the candidates, each joined to its keyword score (hashed once,
# where a jsonb map of the scores cost 0.6 ms to build for a 629-memory scope), else 0.
OUTER_FROM = (
    "FROM memory_memory LEFT JOIN keyword_scores ON keyword_scores.memory_id = memory_memory.id "
    "WHERE memory_memory.id IN "
)
KEYWORD_COLUMN = "coalesce(keyword_scores.bm25, 0)"

# Every column but the embedding and the keyword document, in this order.
FIELD_NAMES = [
    "id",
    "project_id",
    "user_id",
    "agent_id",
    "app_id",
    "run_id",
    "text",
    "hash",
    "metadata",
    "categories",
    "role",
    "actor_id",
    "created_at",
    "updated_at",
    "expiration_date",
    "structured_attributes",
    "state",
    "replaced_by_id",
    "immutable",
    "source_event_id",
    "source_positions",
    "conversation_id",
]
# Timestamps travel as text and are parsed for the winners only: Django's timezone-aware
# loader costs more per candidate row than the rest of the row together.
TEXT_TIMESTAMPS = ("created_at", "updated_at")
COLUMNS = ", ".join(f"{n}::text" if n in TEXT_TIMESTAMPS else n for n in FIELD_NAMES)
EVENT_COLUMN = FIELD_NAMES.index("source_event_id")
CONVERSATION_COLUMN = FIELD_NAMES.index("conversation_id")
TEXT_COLUMN = FIELD_NAMES.index("text")
# A memory's length in words (scoring.Signals.words) is counted over its first this many
# characters: past about 300 words the keyword's bar (scoring.confirmed) is near 0 either way, and
# counting all of 60 candidates of 20,000 characters would cost a search 4 ms.
WORDS_COUNTED = 2000
JSON_FIELDS = ("metadata", "structured_attributes")


@dataclass(frozen=True)
class ScoredMemory:
    memory: Memory
    score: Score


class Ranked(list[ScoredMemory]):
    """hybrid_search's answer: the memories at or above the threshold, best first (a list), and
    `best`, the best score any candidate had (None: no candidate), so that a search returning
    nothing can say how near it came."""

    best: float | None = None
    exact: bool = False  # ranked by exact distance (else the planner's HNSW walk)


def hybrid_search(
    queryset: MemoryQuerySet,
    query: Query,
    *,
    top_k: int,
    threshold: float,
    exact: bool | None = None,
) -> Ranked:
    """Return up to top_k memories of `queryset` best matching `query`, best first.

    A time window the query names ("last week") adds the memories whose event time falls in it
    as candidates and demotes the others (memory.text.temporal, scoring's out_of_window feature).

    The strategy is chosen here, for every caller: a queryset bounded to the scopes it names (a
    user's, agent's or run's memories: scope_bounded) is ranked by exact distance; anything
    wider lets the planner walk the HNSW index. Measured at 100k memories (bench/search.py): for
    one user's scope (up to thousands of rows) the exact scan is as fast or faster (7k rows:
    26 ms against 42 ms), since a filtered HNSW scan visits many nodes outside the scope; HNSW
    wins on large unscoped searches. `exact` overrides the choice (the benchmarks time both).
    """
    if exact is None:
        exact = scope_bounded(queryset)
    vector_literal = query.vector
    names = list(query.names)
    window = query.window
    # The scope ids the filters pin: the names matched by meaning are the pinned scope's.
    similar = _similar_names(pinned_scope(queryset), query, names) if names else None
    try:
        scope = _scope_where(queryset)
    except EmptyResultSet:
        # A caller's own ORM condition that cannot match (pk__in=[]); the filter compiler
        # writes an impossible filter as SQL false instead, which runs like any condition.
        return Ranked()
    candidates, candidate_params = _candidate_queries(
        scope, vector_literal, exact=exact, top_k=top_k, window=window
    )
    # The scope's condition is Django's compiled SQL; every value is a parameter. The keyword
    # CTEs score the scope's matches once; the candidates and the keyword column read them. The
    # entity column is probed on the unique (memory, entity_name) index, once per candidate. The
    # names matched by meaning are found once, in a CTE the entity column reads (the query words'
    # vectors are sent once, in a CTE of their own: a dozen words' are 40 kB of text).
    ctes, cte_params = _keyword_ctes(
        scope, (query.language, query.keywords), vector_literal if exact else None
    )
    if similar is not None:
        similar_sql, similar_params = _similar_ctes(*similar)
        ctes, cte_params = f"{similar_sql}, {ctes}", (*similar_params, *cte_params)
    entity = "'{}'::text[]"
    entity_params: tuple[Any, ...] = ()
    if names:
        entity, entity_params = "e.entity_name = ANY(%s::text[])", (names,)
        if similar is not None:
            entity = f"({entity} OR {IN_SIMILAR.format(column='e.entity_name')})"
        entity = (
            "ARRAY(SELECT e.entity_name FROM memory_memoryentity e "  # noqa: S608
            f"WHERE e.memory_id = memory_memory.id AND {entity})"
        )
    in_window = "(created_at >= %s AND created_at < %s)" if window else "NULL::boolean"
    sql = (
        f"WITH {ctes} SELECT {COLUMNS}, {in_window} AS in_window, "
        "1 - (embedding <=> %s::vector) AS semantic, "
        f"{KEYWORD_COLUMN} AS keyword, "
        f"{entity} AS entity "
        f"{OUTER_FROM}(" + " UNION ".join(f"({c})" for c in candidates) + ")"
    )
    params = (
        *cte_params,
        *((window.start, window.end) if window else ()),
        vector_literal,
        *entity_params,
        *candidate_params,
    )
    # On the read replica when one is configured and caught up, else the primary.
    strategy = "exact" if exact else "hnsw"
    with metrics.timed(metrics.SEARCH_STATEMENT, "search.statement", strategy=strategy):
        rows = fetch_all(sql, params)
    # Fusion needs every candidate's signals; model instances are built for the winners only.
    # A raw message's conversation (across add requests), else the request it came in.
    scores = score_candidates(
        [
            Signals(
                row[-3],
                row[-2],
                row[CONVERSATION_COLUMN] or row[EVENT_COLUMN],
                tuple(row[-1]),
                in_window=row[-4],
                words=len(row[TEXT_COLUMN][:WORDS_COUNTED].split()),
            )
            for row in rows
        ],
        query,
    )
    # The threshold cuts on the score the caller sees (scoring: the fused relevance).
    relevant = [
        (row, score) for row, score in zip(rows, scores, strict=True) if score.score >= threshold
    ]
    relevant.sort(key=lambda pair: pair[1].score, reverse=True)
    ranked = Ranked(ScoredMemory(_memory(row), score) for row, score in relevant[:top_k])
    ranked.exact = exact
    ranked.best = max((score.score for score in scores), default=None)
    return ranked


def score_candidates(candidates: Sequence[Signals], query: Query) -> list[Score]:
    """The candidates' scores for `query`, in their order: scoring.fuse() with the fitted ranker
    of the query's embedding model. bench/replay.py and bench/fit_ranker.py score recorded
    searches through the same functions."""
    return fuse(
        candidates, ranker_for(query.model), names=frozenset(query.names), typical=query.typical
    )


def _scope_where(queryset: MemoryQuerySet) -> tuple[str, tuple[Any, ...]]:
    """The caller's queryset as one condition on memory_memory's rows, compiled once: its WHERE
    clause (a queryset reading the memory table alone), else `id IN (its ids)`. Each candidate
    subquery and keyword CTE repeats it: the statement's parts of a LoCoMo question naming a
    time window took 2.2-3.8 ms to build, the queryset compiled once per part, and take 0.12 ms.
    Raises EmptyResultSet when nothing can match."""
    query = queryset.query
    # A join Django trimmed (the project's, `project=…`) stays in alias_map, unreferenced.
    joined = {alias for alias, count in query.alias_refcount.items() if count}
    if joined - {Memory._meta.db_table} or query.extra_tables:
        # Another table read (a caller's own ORM condition over it, or extra(tables=…)): its
        # ids, as Django writes them.
        sql, params = queryset.order_by().values("id").query.sql_with_params()
        return f"memory_memory.id IN ({sql})", tuple(params)
    try:
        sql, params = query.get_compiler(using=queryset.db).compile(query.where)
    except FullResultSet:
        return "TRUE", ()
    return f"({sql})" if sql else "TRUE", tuple(params)


def _candidate_queries(
    scope: tuple[str, tuple[Any, ...]],
    vector_literal: str,
    *,
    exact: bool,
    top_k: int,
    window: Window | None = None,
) -> tuple[list[str], tuple[Any, ...]]:
    """The candidate subqueries over the scope (_scope_where): their SQL and, in the same order,
    their parameters."""
    where, where_params = scope
    if exact:
        # The scope's single pass (SCOPE_PASS, in the keyword CTEs) has every row's distance.
        semantic_sql = SCOPE_CLOSEST
        semantic_params: tuple[Any, ...] = (max(top_k, SEMANTIC_CANDIDATES),)
    else:
        # The index is on the cast to the embedding space's dimension (memory.models.embedding):
        # the index path repeats it, the query vector's own length.
        dimensions = vector_literal.count(",") + 1
        distance = f"(embedding::vector({dimensions})) <=> %s::vector({dimensions})"
        semantic_sql = f"SELECT id FROM memory_memory WHERE {where} ORDER BY {distance} LIMIT %s"  # noqa: S608
        semantic_params = (*where_params, vector_literal, max(top_k, SEMANTIC_CANDIDATES))
    # The best keyword matches (scored in the statement's keyword CTEs: _keyword_ctes).
    keyword_sql = (
        "SELECT k.memory_id FROM keyword_scores k ORDER BY k.bm25 DESC, k.memory_id LIMIT %s"
    )
    keyword_params = (max(top_k, KEYWORD_CANDIDATES),)
    subqueries, params = [semantic_sql, keyword_sql], (*semantic_params, *keyword_params)
    if window is not None:
        # The scope's memories of the window, closest first (exact: the scope's created_at
        # index narrows them to the window first; "+ 0" hides the distance from the HNSW index).
        window_sql = (
            f"SELECT id FROM memory_memory WHERE {where} AND id IN ("  # noqa: S608
            f"SELECT id FROM memory_memory WHERE {where} "
            "AND created_at >= %s AND created_at < %s ORDER BY created_at DESC LIMIT %s"
            ") ORDER BY (embedding <=> %s::vector) + 0 LIMIT %s"
        )
        window_params = (
            *where_params,
            *where_params,
            window.start,
            window.end,
            WINDOW_ROWS,
            vector_literal,
            max(top_k, WINDOW_CANDIDATES),
        )
        subqueries.append(window_sql)
        params = (*params, *window_params)
    return subqueries, params


def _keyword_ctes(
    scope: tuple[str, tuple[Any, ...]],
    query: tuple[str, str],
    vector_literal: str | None = None,
) -> tuple[str, tuple[Any, ...]]:
    """The keyword CTEs (KEYWORD_CTES) over the scope (_scope_where): their SQL and parameters.
    With the query's vector (the exact path), they read the scope in a single pass
    (SCOPE_PASS) that the semantic candidates read too; without, the keyword matches of a large
    scope are a scan of their own. `query`: the query's language and keyword text."""
    where, where_params = scope
    # Fixed SQL text (DOCUMENT, MATCHING, SCOPE_PASS) around the scope's compiled condition.
    sample_sql = f"SELECT id, {DOCUMENT} AS document FROM memory_memory WHERE {where} LIMIT %s"  # noqa: S608
    head = (*query, *where_params, KEYWORD_SAMPLE, FREQUENT_FROM)
    if vector_literal is None:
        matches_sql = (
            f"SELECT id, {DOCUMENT} AS document FROM memory_memory "  # noqa: S608
            f"WHERE {where} AND {MATCHING}"
        )
        sql = KEYWORD_CTES.replace("<pass>", "")
        tail: tuple[Any, ...] = (KEYWORD_SAMPLE, *where_params, KEYWORD_SAMPLE)
    else:
        matches_sql = SCOPE_MATCHES
        sql = KEYWORD_CTES.replace("<pass>", SCOPE_PASS.replace("<scope>", where))
        tail = (vector_literal, KEYWORD_SAMPLE, *where_params, KEYWORD_SAMPLE)
    sql = sql.replace("<sample>", sample_sql).replace("<matches>", matches_sql)
    return sql, (*head, *tail)


def _similar_names(
    pinned: dict[str, Any], query: Query, names: list[str]
) -> tuple[QuerySet[EntityVector, dict[str, Any]], str] | None:
    """The names of the `pinned` project and scope (pinned_scope) close in meaning to a word of
    the query (a values queryset of `entity_name`, reading the words' vectors from WORDS_CTE)
    and those vectors (a vector[] literal), or None: the filters pin no project or no scope id
    (the project's every name would be compared), or the query has no word to match. The project
    is filtered on here as every query is, not left to row-level security alone."""
    scope = {name: value for name, value in pinned.items() if name in SCOPE_FIELDS}
    project = pinned.get("project_id")
    vectors = query.word_vectors
    if project is None or not scope or vectors is None:
        return None
    names_query = (
        EntityVector.objects.filter(project_id=project, **scope)
        .exclude(entity_name__in=names)
        .annotate(distance=RawSQL(CLOSEST, []))  # noqa: S611 (fixed SQL text, no value)
        .filter(distance__lte=1 - ENTITY_SIMILARITY)
        .order_by("distance")
        .values("entity_name")[:SIMILAR_NAMES]
    )
    return names_query, vectors


def _similar_ctes(
    names_query: QuerySet[EntityVector, dict[str, Any]], vectors: str
) -> tuple[str, tuple[Any, ...]]:
    """The CTEs of the query words' vectors (WORDS_CTE) and of the names close to them
    (SIMILAR_CTE), for a WITH: their SQL and parameters."""
    names_sql, names_params = names_query.query.sql_with_params()
    sql = (
        f"{WORDS_CTE} AS MATERIALIZED (SELECT unnest(%s::vector[]) AS v), "
        f"{SIMILAR_CTE} AS MATERIALIZED ({names_sql})"
    )
    return sql, (vectors, *names_params)


def scope_bounded(queryset: MemoryQuerySet) -> bool:
    """Whether the queryset holds only memories of scopes it names: a scope id equal to a value
    or in a list of values, required at the top of its filter (under AND) or in every branch of
    an OR. A negated condition bounds nothing (`user_id != 'bob'` is nearly everyone)."""

    def bounded(node: WhereNode) -> bool:
        if node.negated:
            return False
        children = [
            bounded(child) if isinstance(child, WhereNode) else _names_scope(child)
            for child in node.children
        ]
        if node.connector == OR:
            return bool(children) and all(children)
        return node.connector == AND and any(children)

    return bounded(queryset.query.where)


def _names_scope(lookup: Any) -> bool:
    """A lookup `scope_id = 'value'` or `scope_id IN (values)` on the memory table."""
    return (
        isinstance(lookup, Exact | In)
        and isinstance(lookup.lhs, Col)
        and lookup.lhs.target.model is Memory
        and lookup.lhs.target.name in SCOPE_FIELDS
        and isinstance(lookup.rhs, str | list | tuple)
    )


def pinned_scope(queryset: MemoryQuerySet) -> dict[str, Any]:
    """The project and the scope ids the queryset requires to equal a value (`project_id = …`,
    `user_id = 'alice'` ANDed at the top of its filter), for narrowing the names matched by
    meaning: {"project_id": …, "user_id": "alice"}, without the keys of what is not pinned."""
    pinned: dict[str, Any] = {}

    def walk(node: WhereNode) -> None:
        if node.connector != AND or node.negated:
            return
        for child in node.children:
            if isinstance(child, WhereNode):
                walk(child)
            elif (
                isinstance(child, Exact)  # RelatedExact (the project) is one too
                and isinstance(child.lhs, Col)
                and child.lhs.target.model is Memory
            ):
                name = child.lhs.target.name
                if name in SCOPE_FIELDS and isinstance(child.rhs, str):
                    pinned[name] = child.rhs
                elif name == "project" and isinstance(child.rhs, uuid.UUID):
                    pinned["project_id"] = child.rhs

    walk(queryset.query.where)
    return pinned


def _memory(row: tuple[Any, ...]) -> Memory:
    values = dict(zip(FIELD_NAMES, row, strict=False))
    for name in JSON_FIELDS:
        if isinstance(values[name], str):
            values[name] = json.loads(values[name])
    for name in TEXT_TIMESTAMPS:
        values[name] = datetime.fromisoformat(values[name])
    # from_db() takes a subset of columns in the model's own field order.
    names = [f.attname for f in Memory._meta.concrete_fields if f.attname in values]
    return Memory.from_db("default", names, [values[name] for name in names])
