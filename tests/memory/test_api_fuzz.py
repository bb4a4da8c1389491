"""Generated hostile requests at every API endpoint (hypothesis).

Whatever arrives — deep nesting, NUL characters, lone surrogates, huge numbers, wrong types,
Unicode digits, empty and huge lists — the answer is below 500 with a JSON `detail` when it is
an error, a refused request changes no row, and every request leaves one access-log row.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, ClassVar
from urllib.parse import quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.django import TestCase as HypothesisTestCase

from audit.models import AccessLog
from memory.models import Feedback, Memory, MemoryEvent, MemoryExport, MemoryHistory
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, auth

MEMORY = "00000000-0000-4000-8000-000000000001"  # replaced by a real memory id per test
FIELDS = [
    "messages", "user_id", "agent_id", "app_id", "run_id", "filters", "metadata", "infer",
    "timestamp", "expiration_date", "immutable", "memory_type", "custom_instructions",
    "custom_categories", "includes", "excludes", "query", "top_k", "limit", "threshold",
    "rerank", "categories", "show_expired", "start_date", "end_date", "text", "data",
    "memories", "memory_id", "feedback", "feedback_reason", "schema", "memory_export_id",
    "role", "content", "name", "AND", "OR", "NOT", "in", "gte", "lt", "ne", "contains",
    "memory_ids", "keywords", "created_at", "*",
]  # fmt: skip

hostile_text = st.one_of(
    st.sampled_from([
        "", " ", "\x00", "a\x00b", "\ud800", "x\udfff", "²", "\u0661\u0662", "9" * 5000, "*",
        "-1", "0", "1e400", "NaN", "2024-02-30", "9999-12-31T23:59:59-05:00", "'; DROP TABLE x;--",
        "$$ }) DETACH DELETE n //", "a & | ! :* <->", "%_\\", "x" * 30_000, MEMORY, "alice",
    ]),
    st.text(max_size=40),
)  # fmt: skip
leaves = st.one_of(
    hostile_text,
    st.integers(min_value=-(10**40), max_value=10**40),
    st.sampled_from([0, -1, 10**12, 2**63, 253402300800]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
json_values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(FIELDS), hostile_text), inner, max_size=4),
    ),
    max_leaves=12,
)
bodies = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6),
    json_values,
)


def encode(value: Any) -> str:
    """JSON text for any generated value (lone surrogates as \\u escapes, as a client sends)."""
    return json.dumps(value, ensure_ascii=True)


@st.composite
def raw_bodies(draw: st.DrawFn) -> str:
    """A JSON body, sometimes wrapped very deep, sometimes with a huge list, sometimes broken."""
    text = encode(draw(bodies))
    shape = draw(st.sampled_from(["plain", "plain", "plain", "deep", "huge", "broken"]))
    if shape == "deep":
        depth = draw(st.sampled_from([33, 1_000, 50_000]))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"filters": ', "}")]))
        return opener * depth + text + closer * depth
    if shape == "huge":
        field = draw(st.sampled_from(["memories", "messages", "categories", "filters"]))
        return encode({field: [draw(leaves)] * draw(st.sampled_from([0, 1001, 60_000]))})
    if shape == "broken":
        return text[: draw(st.integers(min_value=0, max_value=len(text)))]
    return text


BODY_ENDPOINTS = [
    ("post", "/v3/memories/add/"),
    ("post", "/v1/memories/"),
    ("post", "/v3/memories/search/"),
    ("post", "/v2/memories/search/"),
    ("post", "/v1/memories/search/"),
    ("post", "/v3/memories/"),
    ("post", "/v2/memories/"),
    ("put", f"/v1/memories/{MEMORY}/"),
    ("put", "/v1/batch/"),
    ("delete", "/v1/batch/"),
    ("post", "/v1/feedback/"),
    ("post", "/v1/summary/"),
    ("post", "/v1/exports/"),
    ("post", "/v1/exports/get/"),
    ("post", "/v2/profiles/jobs/"),
    ("post", "/v2/profiles/settings/"),
]
QUERY_ENDPOINTS = [
    ("get", "/v1/memories/"),
    ("delete", "/v1/memories/"),
    ("get", "/v1/entities/"),
    ("get", "/v1/events/"),
    ("get", f"/v1/memories/{MEMORY}/"),
    ("get", f"/v1/memories/{MEMORY}/history/"),
    ("post", "/v3/memories/"),
    ("get", "/v2/entities/user/alice/profile/"),
]
QUERY_NAMES = ["filters", "user_id", "agent_id", "run_id", "page", "page_size", "status", "x"]


@st.composite
def query_strings(draw: st.DrawFn) -> str:
    pairs = draw(
        st.lists(
            st.tuples(st.sampled_from(QUERY_NAMES), st.one_of(hostile_text, bodies.map(encode))),
            max_size=3,
        )
    )
    return "&".join(f"{quote(name)}={quote(value, safe='', errors='surrogatepass')}"
                    for name, value in pairs)  # fmt: skip


class HostileRequestsTestCase(HypothesisTestCase, BaseTestCase):
    memory_id: ClassVar[str]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        with project_context(cls.alice.key.project_id):
            memories = add_texts(
                cls.alice.key.project, ["I love green tea", "My cat is Tom"], user_id="alice"
            )
        cls.memory_id = str(memories[0].id)

    def state(self) -> tuple[Any, ...]:
        """Every row a request could write, as (count, latest change) per table."""
        with project_context(self.alice.key.project_id):
            memories = Memory.objects.order_by("-updated_at").values_list("updated_at", "state")
            return (
                Memory.objects.count(),
                list(memories[:5]),
                MemoryHistory.objects.count(),
                MemoryEvent.objects.count(),
                Feedback.objects.count(),
                MemoryExport.objects.count(),
            )

    def access_rows(self) -> int:
        """Alice's rows, and the rows of requests refused before their key was read (413s,
        unknown paths, NUL in the URL): those have no project and are read outside any tenant."""
        with project_context(self.alice.key.project_id):
            mine = AccessLog.objects.count()
        with project_context(None):
            return mine + AccessLog.objects.count()

    def check(self, method: str, path: str, body: str | None = None) -> None:
        path = path.replace(MEMORY, self.memory_id)
        before, logged = self.state(), self.access_rows()
        kwargs: dict[str, Any] = {"headers": auth(self.alice.raw)}
        if body is not None:
            kwargs.update(
                data=body.encode("utf-8", "surrogatepass"), content_type="application/json"
            )
        response = getattr(self.client, method)(path, **kwargs)
        where = f"{method.upper()} {path[:200]} {(body or '')[:200]!r}"
        assert response.status_code < 500, (where, response.content[:300])
        assert response["Content-Type"].startswith("application/json"), where
        payload = response.json()
        if response.status_code >= 400:
            assert isinstance(payload, dict), where
            assert isinstance(payload.get("detail"), str), (where, payload)
            assert payload["detail"], where
            assert self.state() == before, (where, "a refused request changed rows")
        assert self.access_rows() == logged + 1, (where, "no access-log row")

    @settings(
        max_examples=250,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(endpoint=st.sampled_from(BODY_ENDPOINTS), body=raw_bodies())
    def test_hostile_bodies(self, endpoint: tuple[str, str], body: str) -> None:
        self.check(*endpoint, body)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(endpoint=st.sampled_from(QUERY_ENDPOINTS), query=query_strings())
    def test_hostile_query_strings(self, endpoint: tuple[str, str], query: str) -> None:
        method, path = endpoint
        self.check(method, f"{path}?{query}", "{}" if method == "post" else None)

    @settings(max_examples=60, deadline=None)
    @given(
        kind=st.sampled_from(["user", "agent", "app", "run", "x", "²"]),
        name=hostile_text.filter(lambda t: "/" not in t and t not in ("", ".", "..")),
    )
    def test_hostile_path_segments(self, kind: str, name: str) -> None:
        segment = quote(name, safe="", errors="surrogatepass")
        self.check("delete", f"/v2/entities/{quote(kind)}/{segment}/")
        self.check("get", f"/v1/event/{segment}/")

    def test_a_real_memory_id_still_works(self) -> None:
        # The fuzzed paths above do reach real rows: this one changes a memory.
        before = self.state()
        self.check("put", f"/v1/memories/{MEMORY}/", encode({"text": "I love black tea"}))
        assert self.state() != before
        assert uuid.UUID(self.memory_id)
