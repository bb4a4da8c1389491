"""schemathesis against the served OpenAPI schema: every operation, in-process through WSGI.

Each operation of `/api/schema/` gets generated requests (schema examples, coverage cases and
a bounded fuzzing phase, valid and invalid data) with a real API key of a project holding a
few memories, an add event and an erasure request; ids in paths are sometimes those real rows.
Every answer is checked: no 5xx, the status and content type are documented, the body and
headers match the schema, invalid data is refused, the key is really required, an undocumented
method answers 405.

Bounded and seeded: ENGRAM_SCHEMATHESIS_EXAMPLES (default 25) fuzzed requests per operation
and mode; the run is derandomized, so CI sees the same requests every time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis import Case
from schemathesis.core.failures import AcceptedNegativeData
from schemathesis.generation import GenerationMode
from schemathesis.openapi.checks import RejectedPositiveData

from config.env import env_int
from tenants.db import project_context
from tests.factory import add_texts, auth, make_key

EXAMPLES = env_int("ENGRAM_SCHEMATHESIS_EXAMPLES", 25, minimum=1)

CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {
            "deterministic": True,
            "max-examples": EXAMPLES,
            # The key goes in every request (below); ignored_auth checks it is required.
            "with-security-parameters": False,
        },
        "checks": {
            # Stateful checks need a sequence of calls (a stateful run), not these single ones.
            "use_after_free": {"enabled": False},
            "ensure_resource_availability": {"enabled": False},
        },
    }
)
schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application(), config=CONFIG)

# Refusals of schema-valid data that the schema cannot express, each with the rule's reason.
# Any other 400 to data the schema says is valid fails the run (positive_data_acceptance).
INEXPRESSIBLE = {
    # DRF refuses "" where the serializer has allow_blank=False; drf-spectacular writes
    # minLength: 1 only with ENFORCE_NON_BLANK_FIELDS, which also binds the response shapes.
    r"may not be blank",
    # Text of whitespace alone (Python's str.isspace, U+0085 included, which ECMA's \s lacks).
    r"must not be only whitespace",
    # The body-wide rules (config/inputs.py): no NUL character, no lone surrogate, anywhere.
    r"contains a NUL character",
    r"lone surrogate",
    # `filters` is Mem0's filter language (JSON or a Python dict literal, operators, scope
    # keys): a grammar, not a JSON Schema.
    r"^filters",
    # Rules across fields: a scope is named top-level or inside `filters`.
    r"^Give at least one of user_id",
    r"^Name what to delete",
    r"^memory_type: procedural_memory summarises an agent's steps: give agent_id",
    # Rules about rows: a batch names memories of the project, or nothing is changed.
    r"^Memories not found",
    r"lists the same memory_id twice",
    # An add's scope id is not "." or ".." (URL libraries drop such path segments, so no
    # client could erase it): a pattern would need a lookahead, not portable across tools.
    r"must not be '\.{1,2}': HTTP clients drop",
    # Metadata never carries scope ids (OpenAPI 3.0 has no propertyNames to forbid them).
    r"is a scope id and cannot be set through metadata",
    # A part's URL: http(s) to a valid host, or a data URI / base64 of the right kind and size.
    r"^messages\.\d+\.content: (image_url|pdf_url|txt_url|mdx_url|document|image)\b",
    # A time zone is an IANA name this machine's tz database knows.
    r"^timezone: unknown time zone",
    # ISO 8601 with or without an offset (a naive one is read in `timezone`): wider than
    # OpenAPI's date-time format.
    r"^observation_datetime: must be an ISO 8601 date and time",
    # A webhook's URL: http(s) to a host that resolves to public addresses only (a lookup);
    # a body with keys the Platform's webhook endpoints do not know; at most 20 per project.
    r"^url: ",
    r"unknown field; known: ",
    r"^a project has at most \d+ webhooks",
    # A project's PATCH: the Platform settings engram cannot change take only engram's value
    # (an enum of one would be a shared component), category names are unique in any case
    # (no propertyNames in OpenAPI 3.0), at least one setting, the body's ids are the path's.
    r"engram cannot change this: it is always",
    r"^custom_categories: ",
    r"^Give at least one setting to change",
    r"is not the project of the path",
    # Profiles: a profile schema is a JSON Schema with rules of its own (every property
    # described, names and types the model's tools take); the Platform's settings shape refuses
    # unknown keys with its own words; a trigger names its user; only user profiles exist;
    # jobs need the project's profiles enabled first.
    r"^entities: ",
    r"^Unsupported settings",
    r"^entity_id: is required to trigger",
    r"^entity_type: Only user profiles",
    r"^Profiles are not enabled",
}
# Operations whose body the schema cannot declare: OpenAPI 3.0 has no DELETE body.
UNDECLARED_BODY = {"DELETE /v1/batch/"}


def problems(body: dict[str, Any]) -> list[str]:
    """Every problem of an error body as "field.path: message" (the refusal as a whole bare)."""
    found: list[str] = []

    def walk(node: Any, path: list[str]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, path if key == "non_field_errors" else [*path, key])
        elif isinstance(node, list):
            for item in node:
                walk(item, path)
        else:
            found.append(f"{'.'.join(path)}: {node}" if path else str(node))

    walk(body.get("errors") or body["detail"], [])
    return found


def inexpressible(operation: str, body: dict[str, Any]) -> bool:
    """Whether every problem named is one the schema cannot express."""
    if operation in UNDECLARED_BODY:
        return True
    return all(
        any(re.search(rule, problem) for rule in INEXPRESSIBLE) for problem in problems(body)
    )


COERCED = re.compile(r"violates `type` at \S+ \(was \w+, became (integer|number|string)\)")


def padded(value: Any) -> bool:
    """Whether some string in `value` (walked through lists and dicts) has whitespace around it."""
    if isinstance(value, str):
        return value != value.strip()
    if isinstance(value, dict):
        return any(padded(key) or padded(item) for key, item in value.items())
    return isinstance(value, list) and any(padded(item) for item in value)


@schema.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    if isinstance(failure, RejectedPositiveData) and response.status_code == 400:
        return not inexpressible(case.operation.label, response.json())
    # DRF trims the whitespace around a string before it checks max_length; OpenAPI's maxLength
    # counts it. A string too long only by that padding is accepted, and rightly.
    if isinstance(failure, AcceptedNegativeData) and "`maxLength`" in failure.message:
        return not padded([case.body, case.query])
    # DRF's fields coerce one scalar into another (a number into a CharField as its text, "12"
    # into an IntegerField), so a client's numeric user_id works; objects, lists and nulls in
    # the wrong place are still refused and still checked.
    if isinstance(failure, AcceptedNegativeData):
        return not COERCED.search(failure.message)
    return True


# Real rows for the ids in paths, filled per test (the ids are new each time).
KNOWN: dict[str, list[str]] = {}


@schema.hook
def flatmap_case(context: Any, case: Case[Any]) -> Any:
    """Valid requests sometimes name a real row: a memory, an event, an erasure, a user."""
    names = [name for name in case.path_parameters or {} if KNOWN.get(name)]
    if not names or case.meta is None or case.meta.generation.mode is GenerationMode.NEGATIVE:
        return st.just(case)

    def substitute(picks: list[int]) -> Case[Any]:
        for name, pick in zip(names, picks, strict=True):
            case.path_parameters[name] = KNOWN[name][pick % len(KNOWN[name])]
        return case

    size = len(names)
    return st.one_of(
        st.just(case), st.lists(st.integers(0, 7), min_size=size, max_size=size).map(substitute)
    )


@pytest.fixture
def api_key(db: None) -> Iterator[str]:
    key = make_key("acme", "fuzz")
    project = key.key.project
    with project_context(project.pk):
        memories = add_texts(project, ["I drink oolong", "I live in Lisbon"], user_id="alice")
        add_texts(project, ["I play chess"], user_id="bob")
    client, headers = Client(), auth(key.raw)
    added = client.post(
        "/v3/memories/add/", {"messages": "I like jazz", "user_id": "alice"}, "application/json",
        headers=headers,
    )  # fmt: skip
    erasure = client.delete("/v2/entities/user/bob/", headers=headers)
    KNOWN.update(
        memory_id=[str(m.pk) for m in memories],
        event_id=[added.json()["event_id"]],
        erasure_id=[erasure.json()["event_id"]],
        user_id=["alice"],
        name=["alice"],
        org_id=[str(project.organization_id)],
        project_id=[str(project.pk)],
    )
    # Requests share the test's connection and transaction, as the test client's do: the WSGI
    # handler would close a connection it finds inside a transaction when a request ends.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield key.raw
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)
    KNOWN.clear()


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    # One project per operation (the fixture); hypothesis' examples share it.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_it_answers_as_documented(case: Case[Any], api_key: str) -> None:
    case.call_and_validate(headers=auth(api_key))


def test_it_refuses_only_what_the_schema_cannot_express() -> None:
    blank = {"detail": "-", "errors": {"user_id": ["This field may not be blank."]}}
    scope = {"detail": "-", "errors": {"non_field_errors": ["Give at least one of user_id"]}}
    page = {"detail": "page: must be an integer of at least 1 and at most 999999999."}
    missing = {"detail": "-", "errors": {"memories": ["This field is required."]}}
    assert inexpressible("POST /v3/memories/", blank)
    assert inexpressible("POST /v3/memories/add/", scope)
    assert inexpressible("DELETE /v1/batch/", missing)
    assert not inexpressible("GET /v1/events/", page)
    assert not inexpressible("PUT /v1/batch/", missing)
    dots = {"detail": "-", "errors": {"app_id": ["must not be '..': HTTP clients drop '.' …"]}}
    assert inexpressible("POST /v3/memories/add/", dots)
    both = {"detail": "-", "errors": {"user_id": ["This field may not be blank."], "page": ["-"]}}
    assert not inexpressible("POST /v3/memories/", both)
    assert COERCED.search(
        "violates `type` at /properties/user_id/anyOf/1 (was null, became integer)"
    )
    assert not COERCED.search("violates `type` at /properties/user_id (was string, became object)")
    assert padded({"categories": ["ok", "\fwork"]})
    assert not padded({"categories": ["ok", "work"], "top_k": 3})
