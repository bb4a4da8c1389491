"""The filter compiler selects exactly what a plain-Python reading of the filter language selects.

Hypothesis draws filters over small value pools; each one runs as SQL against a fixed set of
memories and through `matches` below over the same rows as Python objects.
"""

from __future__ import annotations

import json
import operator
import random
import uuid
from datetime import UTC, date, datetime
from typing import Any

from django.conf import settings as conf
from django.test import override_settings
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase as HypothesisTestCase

from memory.models import SCOPE_FIELDS, Memory
from memory.retrieval.filters import (
    MAX_CONDITIONS,
    MAX_DEPTH,
    MAX_VALUES,
    FilterError,
    compile_filters,
)
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import make_memory

TEXTS = ["User likes tea", "user LIKES coffee", "Alice travels to Paris", "50% off_sale",
         "back\\slash path", "x' OR 1=1 --", 'quote "double" it', "plain note"]  # fmt: skip
CATEGORIES = [[], ["food"], ["travel"], ["food", "travel"], ["work_stuff"], ["50%_off"]]
METADATA = [{}, {"topic": "food"}, {"topic": "travel", "n": 1}, {"n": 2, "flag": True},
            {"flag": False, "n": 0}, {"n": "1"}, {"n": True}, {"topic": None},
            {"0": "zero", "topic": "Food"}, {"note": "50%_off \\ x' OR 1=1"}]  # fmt: skip
MOMENTS = [datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 15, 12, tzinfo=UTC),
           datetime(2024, 2, 1, tzinfo=UTC), datetime(2024, 3, 10, 8, 30, tzinfo=UTC),
           datetime(2024, 6, 30, 23, tzinfo=UTC)]  # fmt: skip
EXPIRATIONS = [None, None, date(2024, 1, 15), date(2024, 2, 1), date(2024, 6, 30)]
FIELD_POOLS: dict[str, list[Any]] = {
    "user_id": ["alice", "alice", "bob", None], "agent_id": ["bot", None, None, None],
    "app_id": ["web", *[None] * 4], "run_id": ["r1", *[None] * 5], "categories": CATEGORIES,
    "metadata": METADATA, "expiration_date": EXPIRATIONS}  # fmt: skip
ALICE_IDS = [uuid.UUID(int=n) for n in range(1, 81)]
CHARLIE_IDS = [uuid.UUID(int=n) for n in range(1001, 1006)]

# Filter value pools: mostly values the rows hold, plus some they never do.
SCOPE_VALUES = {"user_id": ["alice", "bob", "carol"], "agent_id": ["bot", "other"],
                "app_id": ["web", "x"], "run_id": ["r1", "r2"]}  # fmt: skip
MOMENT_STRINGS = ["2024-01-01", "2024-01-15T12:00:00Z", "2024-01-15T14:00:00+02:00",
                  "2024-02-01T00:00:00", "2024-03-10", "2024-06-30"]  # fmt: skip
CATEGORY_VALUES = ["food", "FOOD", "Travel", "work_stuff", "spam", "50%_off"]
CATEGORY_PARTS = ["oo", "TRAV", "_", "%", "k_s", "", "zzz"]
META_VALUES: dict[str, list[Any]] = {
    "topic": ["food", "Food", "travel", None, 0], "n": [0, 1, 2, 1.0, "1", True],
    "flag": [True, False, 1, "true"], "0": ["zero", 0], "missing": [None, 1],
    "note": ["50%_off \\ x' OR 1=1", "50%"]}  # fmt: skip
META_PARTS = ["oo", "1", "tru", "F", "%", "_", "\\", "'", ""]
WORDS = ["tea", "TEA", "likes", "Paris", "%", "_", "\\", "'", "x' OR 1=1 --", "50%", "off_",
         '"', "zzz"]  # fmt: skip
ID_POOL = [str(i) for i in (*ALICE_IDS[:8], *CHARLIE_IDS[:2], uuid.UUID(int=999))]


# The reference evaluator: the filter language read directly over Python objects.
def pairs(condition: Any) -> list[tuple[str, Any]]:
    return list(condition.items()) if isinstance(condition, dict) else [("eq", condition)]


def scope_ok(value: str | None, condition: Any) -> bool:
    def one(op: str, x: Any) -> bool:
        if op == "eq":
            return value is not None if x == "*" else value == x
        return value != x if op == "ne" else value in x

    return all(one(op, x) for op, x in pairs(condition))


COMPARE = {"eq": operator.eq, "ne": operator.ne, "gt": operator.gt, "gte": operator.ge,
           "lt": operator.lt, "lte": operator.le}  # fmt: skip


def time_ok(value: date | datetime | None, condition: Any, as_date: bool) -> bool:
    if condition == "*":
        return value is not None

    def operand(text: str) -> date | datetime:
        moment = datetime.fromisoformat(text)  # naive means UTC; a date means its midnight
        moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        return moment.date() if as_date else moment

    def one(op: str, x: Any) -> bool:
        if value is None:
            return op == "ne"
        if op == "in":
            return value in [operand(y) for y in x]
        return bool(COMPARE[op](value, operand(x)))

    return all(one(op, x) for op, x in pairs(condition))


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true != 1 and "1" != 1."""
    numbers = (int, float)  # type(True) is bool, not int
    return a == b and (type(a) is type(b) or (type(a) in numbers and type(b) in numbers))


def metadata_ok(metadata: dict[str, Any], conditions: dict[str, Any]) -> bool:
    def one(key: str, op: str, x: Any) -> bool:
        if op == "contains":
            value = metadata.get(key)
            text = value if isinstance(value, str) else json.dumps(value)
            return value is not None and x in text
        equal = key in metadata and json_equal(metadata[key], x)
        return equal if op == "eq" else not equal

    return all(
        key in metadata if cond == "*" else all(one(key, op, x) for op, x in pairs(cond))
        for key, cond in conditions.items()
    )


def field_ok(m: Memory, field: str, cond: Any) -> bool:
    if field in SCOPE_FIELDS:
        return scope_ok(getattr(m, field), cond)
    if field in ("created_at", "updated_at", "expiration_date"):
        return time_ok(getattr(m, field), cond, as_date=field == "expiration_date")
    if field == "categories":
        return all(
            bool({v.lower() for v in x} & set(m.categories))
            if op == "in"
            else any(x.lower() in c for c in m.categories)
            for op, x in pairs(cond)
        )
    if field == "metadata":
        return metadata_ok(m.metadata, cond)
    if field == "keywords":
        return all(
            x in m.text if op == "contains" else x.lower() in m.text.lower()
            for op, x in pairs(cond)
        )
    ids = cond["in"] if isinstance(cond, dict) else cond
    return m.id in {uuid.UUID(i) for i in ids}


def node_ok(m: Memory, node: dict[str, Any]) -> bool:
    def one(key: str, value: Any) -> bool:
        if key == "AND":
            return all(node_ok(m, n) for n in value)
        if key == "OR":
            return any(node_ok(m, n) for n in value)
        if key == "NOT":
            return not all(node_ok(m, n) for n in (value if isinstance(value, list) else [value]))
        return field_ok(m, key, value)

    return all(one(k, v) for k, v in node.items())


def matches(m: Memory, filters: dict[str, Any]) -> bool:
    """A filter tests the scope ids it names and no others (Mem0: "Unmentioned entities are
    not constrained")."""
    return node_ok(m, filters)


# Strategies for filters.
def ops(operands: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """One or two of the operators (more would rarely leave any match)."""
    names = st.lists(st.sampled_from(sorted(operands)), min_size=1, max_size=2, unique=True)
    return names.flatmap(lambda keys: st.fixed_dictionaries({k: operands[k] for k in keys}))


def scope_condition(field: str) -> st.SearchStrategy[Any]:
    v = st.sampled_from(SCOPE_VALUES[field])
    conditions = ops({"eq": v | st.just("*"), "ne": v, "in": st.lists(v, max_size=3)})
    return st.one_of(v, st.just("*"), conditions)


moment = st.sampled_from(MOMENT_STRINGS)
time_ops = ops({**dict.fromkeys(COMPARE, moment), "in": st.lists(moment, max_size=3)})


def metadata_condition(key: str) -> st.SearchStrategy[Any]:
    value = st.sampled_from(META_VALUES[key])
    parts = st.sampled_from(META_PARTS)
    return st.one_of(st.just("*"), value, ops({"eq": value, "ne": value, "contains": parts}))


meta_keys = st.lists(st.sampled_from(sorted(META_VALUES)), min_size=1, max_size=2, unique=True)
category = st.lists(st.sampled_from(CATEGORY_VALUES), max_size=3)
word = st.sampled_from(WORDS)
ids = st.lists(st.sampled_from(ID_POOL), max_size=3)
CONDITIONS: dict[str, st.SearchStrategy[Any]] = {
    **{field: scope_condition(field) for field in SCOPE_FIELDS},
    **dict.fromkeys(
        ("created_at", "updated_at", "expiration_date"), st.just("*") | moment | time_ops
    ),
    "categories": ops({"in": category, "contains": st.sampled_from(CATEGORY_PARTS)}),
    "metadata": meta_keys.flatmap(
        lambda ks: st.fixed_dictionaries({k: metadata_condition(k) for k in ks})
    ),
    "keywords": word | ops({"eq": word, "contains": word, "icontains": word}),
    "memory_ids": ids | ids.map(lambda x: {"in": x}),
}
# One or two field conditions, or now and then an empty object (which matches everything).
leaf = (
    st.lists(st.sampled_from([*CONDITIONS, None, None]), min_size=1, max_size=2, unique=True)
    .map(lambda keys: [k for k in keys if k])
    .flatmap(lambda keys: st.fixed_dictionaries({k: CONDITIONS[k] for k in keys}))
)


def filters(depth: int = 3) -> st.SearchStrategy[dict[str, Any]]:
    if depth == 0:
        return leaf
    sub = filters(depth - 1)
    some = st.lists(sub, max_size=3)
    logical = ops({"AND": some, "OR": some, "NOT": sub | st.lists(sub, min_size=1, max_size=2)})
    return st.one_of(leaf, logical, st.tuples(leaf, logical).map(lambda p: {**p[0], **p[1]}))


# Each refused filter with a word its error message must name (or "" for any message).
REFUSED = [({"colour": "red"}, "'colour'"), ({"OR": [{"NOT": {"colour": 1}}]}, "'colour'"),
           ({"user_id": {"like": "a%"}}, "'like'"), ({"created_at": {"between": []}}, "'between'"),
           ({"categories": "food"}, "'eq'"), ({"metadata": {"k": {"gt": 1}}}, "'gt'"),
           ({"keywords": {"regex": "a.*"}}, "'regex'"), ({"user_id": {}}, "'user_id'"),
           ({"user_id": True}, "user_id"), ({"user_id": ["alice"]}, "user_id"),
           ({"user_id": {"in": "alice"}}, "user_id.in"), ({"agent_id": {"ne": None}}, "agent_id"),
           ({"AND": {"user_id": "alice"}}, "AND"), ({"OR": ["user_id"]}, "OR"),
           ({"NOT": []}, "NOT"), ({"NOT": "alice"}, "NOT"), ({"created_at": "soon"}, "created_at"),
           ({"created_at": {"gt": 20240101}}, "created_at"),
           ({"expiration_date": {"in": "2024-01-01"}}, "expiration_date.in"),
           ({"categories": {"in": [1]}}, "categories"), ({"categories": {"contains": None}}, ""),
           ({"metadata": "food"}, "metadata"), ({"metadata": {}}, "metadata"),
           ({"metadata": {"": 1}}, "metadata"), ({"metadata": {"k": {"contains": 2}}}, "metadata"),
           ({"metadata": {"k": float("nan")}}, "metadata.k"), ({"keywords": 5}, "keywords"),
           ({"keywords": {"contains": ["tea"]}}, "keywords"), ({"memory_ids": ["x"]}, "UUID"),
           ({"memory_ids": [1]}, "UUID"), ({"memory_ids": str(ALICE_IDS[0])}, "memory_ids"),
           ({"memory_ids": {"in": str(ALICE_IDS[0])}}, "memory_ids")]  # fmt: skip


def size(node: Any) -> tuple[int, int]:
    """(conditions, values) as docs/filters.md counts: keys of objects; operands, list items."""
    if isinstance(node, dict):
        parts = [size(v) for v in node.values()]
        return len(node) + sum(c for c, _ in parts), sum(v for _, v in parts)
    if isinstance(node, list):
        parts = [size(v) for v in node]
        return sum(c for c, _ in parts), sum(v for _, v in parts)
    return 0, 1


def text_operands(key: str, value: Any) -> list[str]:
    """The string operands of one field's text matches: keywords (any operator), and
    `contains` on categories and on each metadata key."""
    if key == "keywords":
        return [v for _, v in pairs(value) if isinstance(v, str)]
    conditions = [value] if key == "categories" else []
    if key == "metadata" and isinstance(value, dict):
        conditions = list(value.values())
    return [v for c in conditions for op, v in pairs(c) if op == "contains" and isinstance(v, str)]


def text_matches(node: Any) -> tuple[int, int]:
    """(characters, conditions) of a filter's text matches, as docs/filters.md counts them."""
    chars = count = 0
    items = node if isinstance(node, list) else [node]
    for item in items:
        for key, value in item.items() if isinstance(item, dict) else ():
            if key in ("AND", "OR", "NOT"):
                more_chars, more = text_matches(value)
            else:
                operands = text_operands(key, value)
                more_chars, more = sum(map(len, operands)), len(operands)
            chars, count = chars + more_chars, count + more
    return chars, count


def refusal(filters: Any) -> str:
    try:
        compile_filters(filters)
    except FilterError as error:
        return str(error)
    raise AssertionError(f"accepted {filters!r}")


IMPOSSIBLE: list[dict[str, Any]] = [
    {"memory_ids": []},
    {"memory_ids": {"in": []}},
    {"OR": []},
    {"user_id": {"in": []}},
    {"created_at": {"in": []}},
]


def nested(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"user_id": "alice"}
    for level in range(levels):
        node = {"AND": [node]} if level % 2 else {"NOT": node}
    return node


class CompileFiltersTestCase(HypothesisTestCase, BaseTestCase):
    memories: list[Memory]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        pick = random.Random(20240115).choice  # a fixed, varied data set
        cls.memories = []
        with project_context(cls.alice.key.project_id):
            for memory_id in ALICE_IDS:
                fields = {name: pick(pool) for name, pool in FIELD_POOLS.items()}
                created = pick(MOMENTS)
                later = pick([t for t in MOMENTS if t >= created])
                m = make_memory(
                    cls.alice.key.project_id, pick(TEXTS), id=memory_id,
                    created_at=created, updated_at=later, **fields,
                )  # fmt: skip
                cls.memories.append(m)
        with project_context(cls.charlie.key.project_id):
            for memory_id in CHARLIE_IDS:
                make_memory(cls.charlie.key.project_id, pick(TEXTS), id=memory_id, user_id="alice")

    def select(
        self, filters: dict[str, Any] | None, project_id: uuid.UUID | None = None
    ) -> set[uuid.UUID]:
        with project_context(project_id or self.alice.key.project_id):
            return set(Memory.objects.filter(compile_filters(filters)).values_list("id", flat=True))

    def expected(self, filters: dict[str, Any]) -> set[uuid.UUID]:
        return {m.id for m in self.memories if matches(m, filters)}

    @settings(max_examples=150, deadline=None)
    @given(filters())
    @example({"NOT": {}})
    @example({"OR": [{}, {"user_id": "bob"}]})
    @example({"OR": [{"AND": []}, {"keywords": "tea"}], "NOT": {"OR": []}})
    @example({"metadata": {"0": "zero", "topic": {"ne": None}}})
    @example({"metadata": {"n": 1, "flag": {"ne": False}}})
    @example({"expiration_date": {"ne": "2024-02-01"}})
    @example({"NOT": {"expiration_date": {"lte": "2024-02-01"}}, "agent_id": "*"})
    @example({"NOT": {"metadata": {"note": {"contains": "%"}}}})
    @example({"categories": {"in": ["FOOD", "Travel"]}, "NOT": {"categories": {"contains": "K_S"}}})
    def test_it_selects_what_the_reference_evaluator_selects(self, filters: dict[str, Any]):
        conditions, values = size(filters)
        chars, texts = text_matches(filters)
        if conditions > MAX_CONDITIONS or values > MAX_VALUES:
            assert "filters hold more than" in refusal(filters)
        elif chars > conf.ENGRAM_MAX_FILTER_OPERAND_CHARS:
            assert "(ENGRAM_MAX_FILTER_OPERAND_CHARS)" in refusal(filters)
        elif texts > conf.ENGRAM_MAX_FILTER_TEXT_CONDITIONS:
            assert "(ENGRAM_MAX_FILTER_TEXT_CONDITIONS)" in refusal(filters)
        else:
            assert self.select(filters) == self.expected(filters)

    @override_settings(ENGRAM_MAX_FILTER_OPERAND_CHARS=12, ENGRAM_MAX_FILTER_TEXT_CONDITIONS=4)
    def test_it_caps_text_matches_in_characters_and_in_number(self):
        at_limits = {
            "OR": [{"keywords": {"contains": "tea", "icontains": "TEA"}}, {"keywords": "Paris"}],
            "NOT": {"metadata": {"note": {"contains": "%"}, "topic": "food"}},
        }
        assert text_matches(at_limits) == (12, 4)
        assert self.select(at_limits) == self.expected(at_limits)
        one_more_char = {**at_limits, "categories": {"contains": "o"}}
        assert refusal(one_more_char).endswith("is 12 (ENGRAM_MAX_FILTER_OPERAND_CHARS).")
        one_more_match = {**at_limits, "categories": {"contains": ""}}
        assert refusal(one_more_match).endswith("is 4 (ENGRAM_MAX_FILTER_TEXT_CONDITIONS).")

    def test_an_impossible_filter_compiles_to_sql_every_reader_can_run(self):
        """Not to EmptyResultSet, which only the ORM's own evaluation catches: readers that put
        the compiled SQL in statements of their own (search, the graph) answered 500."""
        for impossible in IMPOSSIBLE:
            where = compile_filters(impossible)
            with project_context(self.alice.key.project_id):
                sql, _ = Memory.objects.filter(where).values("id").query.sql_with_params()
                assert "false" in sql, impossible
            assert self.select(impossible) == set(), impossible
            negated = self.expected({"NOT": impossible})
            assert negated and self.select({"NOT": impossible}) == negated, impossible

    def test_it_takes_filters_up_to_the_size_limits_and_no_larger(self):
        ors = [{"user_id": "alice"}] * (MAX_CONDITIONS - 1)
        assert self.select({"OR": ors}) == self.expected({"OR": ors})
        assert "more than 100 conditions" in refusal({"OR": [*ors, {"user_id": "bob"}]})
        ids = [str(uuid.uuid4()) for _ in range(MAX_VALUES - 1)] + [str(ALICE_IDS[0])]
        assert self.select({"memory_ids": ids}) == {ALICE_IDS[0]}
        assert "more than 1000 values" in refusal({"memory_ids": [*ids, ids[0]]})
        in_list = {"user_id": {"in": ["alice"] * MAX_VALUES}}
        assert self.select(in_list) == self.expected(in_list)

    def test_it_selects_every_memory_of_the_project_for_no_filter(self):
        assert self.select(None) == self.select({}) == set(ALICE_IDS)
        assert self.select(None, self.charlie.key.project_id) == set(CHARLIE_IDS)
        assert self.select({"memory_ids": [str(i) for i in CHARLIE_IDS]}) == set()

    def test_it_matches_quotes_sql_and_like_wildcards_literally(self):
        hostile = ["x' OR 1=1 --", "%", "_", "\\", '"', "'; DROP TABLE memory_memory; --"]
        for text in hostile:
            for f in ({"keywords": text}, {"keywords": {"contains": text}}):
                assert self.select(f) == {m.id for m in self.memories if text in m.text}, f
            notes = {m.id for m in self.memories if text in m.metadata.get("note", "")}
            assert self.select({"metadata": {"note": {"contains": text}}}) == notes, text
            cats = {m.id for m in self.memories if any(text in c for c in m.categories)}
            assert self.select({"categories": {"contains": text}}) == cats, text
            assert self.select({"user_id": text}) == set()
            assert self.select({"metadata": {text: text}}) == set()
        assert self.select({"keywords": "x' OR 1=1 --"}), "the data set holds that text"
        assert self.select({"keywords": "_"}) < set(ALICE_IDS), "_ is no wildcard"
        assert self.select({"keywords": "%"}) < set(ALICE_IDS), "% is no wildcard"

    def test_it_names_the_field_or_operator_it_refuses(self):
        for filters, named in REFUSED:
            assert named in refusal(filters), filters
        assert "JSON object" in refusal(["user_id", "alice"])

    def test_it_refuses_nesting_deeper_than_max_depth(self):
        assert self.select(nested(MAX_DEPTH)) == self.expected(nested(MAX_DEPTH))
        assert f"deeper than {MAX_DEPTH}" in refusal(nested(MAX_DEPTH + 1))
