"""The OpenAPI schema against the real API: every documented response, checked on the wire.

Each sample request gets the status it expects, and its body is validated against the schema
for that path, method and status (JSON Schema, `$ref`s resolved in components/schemas).
Response objects of a fixed shape are closed (additionalProperties: false), so a key the schema
lacks fails like a missing one. Every status each operation documents must be exercised by a
sample here, so the schema cannot promise what the API does not do, nor miss what it does.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from io import StringIO
from typing import Any, ClassVar
from unittest import mock
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache as django_cache
from django.core.management import call_command
from django.test import override_settings
from django.urls import resolve
from jsonschema import Draft202012Validator, FormatChecker  # type: ignore[import-untyped]
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from memory import actions, graph
from memory.actions import profiles as profile_actions
from memory.api import processed
from memory.api import responses as r
from memory.api.events import event_data
from memory.api.memories import history_data
from memory.api.serializers import AddSerializer, memory_data
from memory.extraction.llm.offline import OfflineExtractor
from memory.extraction.llm.types import Context, Fact, ModelOutputError, Usage
from memory.extraction.pipeline import process_event
from memory.models import Memory, MemoryEvent, MemoryHistory, ScopeSummary
from memory.text import embeddings
from tenants.actions import do_create_project_key
from tenants.db import project_context
from tenants.models import Project
from tests.base import BaseTestCase
from tests.factory import add_texts, auth
from webhooks import actions as webhook_actions

BASE = "urn:engram:openapi"
MISSING = uuid.UUID("00000000-0000-4000-8000-000000000000")
ALICE = {"filters": {"user_id": "alice"}}
GRAPH = {"enable_graph": True}
V1_1 = {"output_format": "v1.1"}
ALL = {"latest_only": False, "include_merged": True, "keyword_search": True}
TRAVERSE = {"entity": "alice", **ALICE}
NEW_FACT = {"messages": "I drink oolong", "user_id": "alice", "infer": False}
# A synchronous add (infer=true, waited for): as mem0ai 0.1.x sends it to v1, and on v3.
LEGACY_ADD = {"messages": "I drink matcha", "user_id": "fay"}
SYNC_ADD = {**LEGACY_ADD, "async_mode": False}
OTHER_FACT = {"messages": "I drink sencha", "user_id": "alice", "infer": False}
PROFILE_SCHEMA = {"properties": {"drink": {"type": "string", "description": "What they drink"}}}
PROFILE_SETTINGS = {"enabled": True, "entities": {"user": {"schema": PROFILE_SCHEMA}}}
TRIGGER = {"operation": "trigger", "entity_type": "user", "entity_id": "alice"}

# Documented statuses that no sample can cause, each with the reason. Empty: the one fault the
# API documents (503, the hosted embedder down) is caused below by pointing it at a closed port.
NEEDS_A_LIVE_FAULT: dict[tuple[str, str, int], str] = {}
# The project and member changes a key whose creator lacks the role refuses (the samples' key was
# made by a superuser: it acts as an owner); tests/tenants/test_projects_api.py sends them.
PROJECT = "/api/v1/orgs/organizations/{org_id}/projects/"
for _method, _path in [("post", ""), ("patch", "{project_id}/")] + [
    (m, "{project_id}/members/") for m in ("post", "put", "delete")
]:
    NEEDS_A_LIVE_FAULT[(_method, PROJECT + _path, 403)] = "a key whose creator is a reader"
# So do webhook and profile settings changes (tests/webhooks/test_api.py, tests/memory/
# test_profiles.py send them).
for _method, _path in [
    ("post", "/api/v1/webhooks/projects/{project_id}/"),
    ("put", "/api/v1/webhooks/{webhook_id}/"),
    ("delete", "/api/v1/webhooks/{webhook_id}/"),
    ("post", "/v2/profiles/settings/"),
]:
    NEEDS_A_LIVE_FAULT[(_method, _path, 403)] = "a key whose creator is a reader"
# Operations that read a JSON body the schema cannot declare (OpenAPI 3.0 has no DELETE body).
UNDECLARED_BODY = {("delete", "/v1/batch/")}
WEBHOOK_URL = "https://93.184.215.14/hook"


@cache
def openapi() -> dict[str, Any]:
    """The served schema, generated as `manage.py spectacular` does: valid, no warnings."""
    out = StringIO()
    call_command(
        "spectacular", "--format", "openapi-json", "--validate", "--fail-on-warn", stdout=out
    )
    schema: dict[str, Any] = json.loads(out.getvalue())
    return schema


def json_schema(node: Any) -> Any:
    """OpenAPI 3.0 → JSON Schema 2020-12: `nullable` allows null; `$ref`s name the document."""
    if isinstance(node, list):
        return [json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    schema = {key: json_schema(value) for key, value in node.items() if key != "nullable"}
    if isinstance(schema.get("$ref"), str):
        schema["$ref"] = BASE + schema["$ref"]
    if node.get("nullable") is True:
        schema = {"anyOf": [schema, {"type": "null"}]}
    return schema


@cache
def registry() -> Registry[Any]:
    document: Registry[Any] = Registry().with_resource(
        BASE, DRAFT202012.create_resource(json_schema(openapi()))
    )
    return document


def is_datetime(value: object) -> bool:
    return not isinstance(value, str) or datetime.fromisoformat(value).tzinfo is not None


def is_uri(value: object) -> bool:
    return not isinstance(value, str) or bool(urlsplit(value).scheme and urlsplit(value).netloc)


# jsonschema checks these two formats only with optional packages; these are enough here.
FORMATS = FormatChecker()
FORMATS.checks("date-time", raises=ValueError)(is_datetime)
FORMATS.checks("uri")(is_uri)


def problems(body: Any, schema: dict[str, Any]) -> list[str]:
    validator = Draft202012Validator(
        json_schema(schema), registry=registry(), format_checker=FORMATS
    )
    return [
        f"{e.json_path}: {e.message}"
        for e in sorted(validator.iter_errors(body), key=lambda e: e.json_path)
    ]


def component(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in openapi()["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def template(path: str) -> str:
    """The schema's path for a request path: its Django route, with {name} for <conv:name>."""
    route = resolve(urlsplit(path).path).route
    for part in route.split("/"):
        if part.startswith("<"):
            route = route.replace(part, "{" + part.strip("<>").split(":")[-1] + "}")
    return "/" + route


class Refusing(OfflineExtractor):
    """A model whose replies cannot be used: its requests fail."""

    def extract(self, context: Context) -> tuple[list[Fact], Usage]:
        raise ModelOutputError("the model refused (asked twice)")


class Silent(OfflineExtractor):
    """A model that finds nothing: its requests get the first-person warning."""

    def extract(self, context: Context) -> tuple[list[Fact], Usage]:
        return [], Usage()


@dataclass(frozen=True)
class Sample:
    """A request and the status it must get. `fault`: what goes wrong around it, if anything."""

    status: int
    method: str
    path: str
    body: Any = None
    content_type: str = "application/json"
    key: bool = True
    fault: str | None = None
    idempotency_key: str | None = None

    def covers(self) -> tuple[str, str, int]:
        return self.method, template(self.path), self.status


class ApiSchemaTestCase(BaseTestCase):
    ids: ClassVar[dict[str, uuid.UUID]]
    webhooks: ClassVar[list[int]]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        project = cls.alice.key.project
        with project_context(project.pk):
            tea, cat, bike, chess = add_texts(
                project,
                ["I love green tea", "My cat is Tom", "I ride a red bike", "I play chess"],
                user_id="alice",
            )
            (puppy,) = add_texts(project, ["My dog is a puppy"], user_id="alice")
            dog = actions.do_supersede_memory(
                puppy,
                actions.NewMemory("My dog is grown up", puppy.embedding, puppy.scope, {}, []),
                actor=actions.Actor.command("schema-test"),
            )
            add_texts(project, ["Bob keeps bees"], user_id="bob")
            add_texts(project, ["Carol sails"], user_id="carol")
            done = cls.queue("I moved to Lisbon last year.")
            process_event(done.id, project.pk, OfflineExtractor())
            pending = cls.queue("I started learning Portuguese.")
            warned = cls.queue("I work at a bakery in Porto.")
            process_event(warned.id, project.pk, Silent())
            export = actions.do_create_export(
                project, schema={}, filters=ALICE["filters"], result=[memory_data(tea)]
            )
            erasure = actions.do_request_user_erasure(project, "erin", actor="test")
            job, _ = profile_actions.do_create_profile_job(
                project.pk, "trigger", ["alice"], "schema-profile-job"
            )
        # The graph: a relation asserted by the tea memory, another contradicted.
        alice = graph.Scope(user_id="alice")
        graph.upsert_relation(project.pk, "alice", "loves", "green tea", alice, memory_id=tea.id)
        graph.upsert_relation(project.pk, "alice", "rides", "bike", alice, memory_id=bike.id)
        graph.invalidate_relations(project.pk, alice, source="alice", destination="bike")
        cls.ids = {"tea": tea.id, "cat": cat.id, "bike": bike.id, "chess": chess.id, "dog": dog.id}
        cls.ids |= {"done": done.id, "pending": pending.id, "export": export.id}
        cls.ids |= {"warned": warned.id}
        cls.ids |= {"erasure": erasure.id, "job": job.id}
        # What the summary samples read, and the user the member samples add.
        with project_context(project.pk):
            ScopeSummary.objects.create(project=project, user_id="alice", text="Alice likes tea.")
        for name in ("bea", "cid"):
            get_user_model().objects.create_user(name, email=f"{name}@example.com")
        # The samples' key acts as an owner: made by a superuser (a key made at the server, with
        # no creator, acts as an admin and may not change members).
        root = get_user_model().objects.create_superuser("root", email="root@example.com")
        cls.alice = do_create_project_key(project, name="root's", created_by=root)
        # The webhook samples' webhooks (a public address: no DNS lookup, no receiver).
        with project_context(project.pk):
            cls.webhooks = [
                webhook_actions.do_create_webhook(
                    project.pk, name=name, url=WEBHOOK_URL, event_types=["memory_add"]
                ).pk
                for name in ("kept", "deleted")
            ]

    @classmethod
    def queue(cls, text: str) -> MemoryEvent:
        """An add request with infer=true, queued the way the API queues it."""
        serializer = AddSerializer(data={"messages": text, "user_id": "alice"})
        serializer.is_valid(raise_exception=True)
        payload = serializer.event_payload(Project())
        return actions.do_queue_add(cls.alice.key.project, payload)

    def samples(self) -> list[Sample]:
        i = {name: str(value) for name, value in self.ids.items()}
        tea, missing = f"/v1/memories/{i['tea']}/", f"/v1/memories/{MISSING}/"
        table = [
            Sample(200, "get", "/v1/ping/"),
            Sample(200, "post", "/v3/memories/add/", NEW_FACT),
            Sample(200, "post", "/v3/memories/add/", {**NEW_FACT, "infer": True}),
            Sample(400, "post", "/v3/memories/add/", {"messages": "I drink oolong"}),
            Sample(503, "post", "/v3/memories/add/", NEW_FACT, fault="embedder down"),
            Sample(200, "post", "/v1/memories/", NEW_FACT),
            # A key's first request, then another body with the same key.
            Sample(200, "post", "/v3/memories/add/", NEW_FACT, idempotency_key="schema-key-1"),
            Sample(409, "post", "/v3/memories/add/", OTHER_FACT, idempotency_key="schema-key-1"),
            Sample(200, "post", "/v1/memories/", NEW_FACT, idempotency_key="schema-key-2"),
            Sample(409, "post", "/v1/memories/", OTHER_FACT, idempotency_key="schema-key-2"),
            Sample(200, "post", "/v1/memories/", {**NEW_FACT, "infer": True, "async_mode": True}),
            Sample(
                200,
                "post",
                "/v1/memories/",
                {**NEW_FACT, "infer": True, "async_mode": True, **V1_1, "version": "v2"},
            ),
            # Synchronous adds: processed in time, not in time, failed, erased meanwhile.
            Sample(200, "post", "/v3/memories/add/", SYNC_ADD, fault="worker"),
            Sample(200, "post", "/v1/memories/", LEGACY_ADD, fault="worker"),
            Sample(200, "post", "/v1/memories/", {**LEGACY_ADD, **V1_1}, fault="worker"),
            Sample(202, "post", "/v3/memories/add/", SYNC_ADD, fault="no worker"),
            Sample(202, "post", "/v1/memories/", LEGACY_ADD, fault="no worker"),
            Sample(502, "post", "/v3/memories/add/", SYNC_ADD, fault="extraction fails"),
            Sample(502, "post", "/v1/memories/", LEGACY_ADD, fault="extraction fails"),
            Sample(410, "post", "/v3/memories/add/", SYNC_ADD, fault="erased meanwhile"),
            Sample(410, "post", "/v1/memories/", LEGACY_ADD, fault="erased meanwhile"),
            Sample(200, "post", "/v1/memories/", {**NEW_FACT, "output_format": "v1.0"}),
            Sample(400, "post", "/v1/memories/", {**NEW_FACT, "messages": []}),
            Sample(503, "post", "/v1/memories/", NEW_FACT, fault="embedder down"),
            Sample(200, "post", "/v3/memories/search/", {"query": "tea", **ALICE}),
            Sample(400, "post", "/v3/memories/search/", {"query": "tea", "filters": {"x": 1}}),
            Sample(503, "post", "/v3/memories/search/", {"query": "tea"}, fault="embedder down"),
            Sample(200, "post", "/v2/memories/search/", {"query": "tea", **ALICE}),
            Sample(400, "post", "/v2/memories/search/", ALICE),
            Sample(503, "post", "/v2/memories/search/", {"query": "tea"}, fault="embedder down"),
            Sample(200, "post", "/v1/memories/search/", {"query": "tea", "user_id": "alice"}),
            Sample(200, "post", "/v1/memories/search/", {"query": "tea", **ALICE, **V1_1}),
            Sample(200, "post", "/v2/memories/search/", {"query": "tea", **ALICE, **V1_1}),
            Sample(200, "post", "/v3/memories/search/", {"query": "tea", **ALICE, **GRAPH}),
            Sample(200, "post", "/v2/memories/search/", {"query": "tea", **ALICE, **GRAPH}),
            Sample(200, "post", "/v1/memories/search/", {"query": "tea", **ALICE, **GRAPH}),
            Sample(400, "post", "/v1/memories/search/", {"query": "tea", "top_k": 0}),
            Sample(503, "post", "/v1/memories/search/", {"query": "tea"}, fault="embedder down"),
            Sample(200, "post", "/v1/context/", {"query": "tea", **ALICE, "format": "json"}),
            Sample(200, "post", "/v1/context/", ALICE),
            Sample(400, "post", "/v1/context/", {**ALICE, "max_tokens": 1}),
            Sample(503, "post", "/v1/context/", {"query": "tea"}, fault="embedder down"),
            Sample(200, "post", "/v3/memories/?page=1&page_size=1", ALICE),
            Sample(400, "post", "/v3/memories/?page=0", ALICE),
            Sample(404, "post", "/v3/memories/?page=99", ALICE),
            Sample(200, "post", "/v2/memories/", ALICE),
            Sample(200, "post", "/v2/memories/", {**ALICE, **V1_1}),
            Sample(200, "post", "/v2/memories/?page_size=1", ALICE),
            Sample(400, "post", "/v2/memories/", {"filters": ["user_id"]}),
            Sample(404, "post", "/v2/memories/?page=99", ALICE),
            Sample(200, "get", "/v1/memories/?user_id=alice"),
            Sample(200, "get", "/v1/memories/?user_id=alice&output_format=v1.1"),
            Sample(200, "get", "/v1/memories/?user_id=alice&page=2&page_size=1"),
            Sample(400, "get", "/v1/memories/?filters=[]"),
            Sample(404, "get", "/v1/memories/?user_id=alice&page=99"),
            Sample(200, "get", tea),
            Sample(404, "get", missing),
            Sample(200, "put", tea, {"text": "I love white tea", "metadata": {"v": 2}}),
            Sample(400, "put", tea, {"text": "   "}),
            Sample(404, "put", missing, {"text": "I love black tea"}),
            Sample(503, "put", tea, {"text": "I love black tea"}, fault="embedder down"),
            Sample(200, "get", f"{tea}history/"),
            Sample(404, "get", f"{missing}history/"),
            Sample(200, "post", "/v1/feedback/", {"memory_id": i["tea"], "feedback": "positive"}),
            Sample(200, "post", "/v1/feedback/", {"memory_id": i["tea"]}),
            Sample(400, "post", "/v1/feedback/", {"memory_id": "tea"}),
            Sample(404, "post", "/v1/feedback/", {"memory_id": str(MISSING)}),
            Sample(200, "delete", f"/v1/memories/{i['bike']}/"),
            Sample(404, "delete", f"/v1/memories/{i['bike']}/"),
            # The dog memory superseded an older one: read both, then delete the chain.
            Sample(200, "post", "/v3/memories/search/", {"query": "dog", **ALICE, **ALL}),
            Sample(200, "post", "/v3/memories/", {**ALICE, **ALL}),
            Sample(200, "get", "/v1/memories/?user_id=alice&latest_only=false"),
            Sample(400, "delete", f"/v1/memories/{i['dog']}/?delete_linked=maybe"),
            Sample(200, "delete", f"/v1/memories/{i['dog']}/?delete_linked=true"),
            Sample(
                200, "put", "/v1/batch/", {"memories": [{"memory_id": i["cat"], "text": "Tim"}]}
            ),
            Sample(400, "put", "/v1/batch/", {"memories": []}),
            Sample(
                503,
                "put",
                "/v1/batch/",
                {"memories": [{"memory_id": i["cat"], "text": "My cat is Tim"}]},
                fault="embedder down",
            ),
            Sample(200, "delete", "/v1/batch/", {"memories": [{"memory_id": i["chess"]}]}),
            Sample(400, "delete", "/v1/batch/", {"memories": [{"memory_id": str(MISSING)}]}),
            Sample(200, "get", "/v1/entities/"),
            Sample(400, "get", "/v1/entities/?page_size=0"),
            Sample(404, "get", "/v1/entities/?page=99"),
            Sample(202, "delete", "/v2/entities/user/carol/"),
            Sample(200, "delete", "/v2/entities/agent/carols-bot/"),
            Sample(400, "delete", "/v2/entities/team/carol/"),
            Sample(202, "delete", "/v1/entities/user/carol/"),
            Sample(200, "delete", "/v1/entities/run/carols-run/"),
            Sample(200, "get", f"/v1/erasures/{i['erasure']}/"),
            Sample(404, "get", f"/v1/erasures/{MISSING}/"),
            Sample(400, "delete", "/v1/entities/team/carol/"),
            Sample(200, "delete", "/v1/memories/?user_id=bob"),
            Sample(400, "delete", "/v1/memories/"),
            Sample(200, "get", f"/v1/event/{i['done']}/"),
            Sample(200, "get", f"/v1/event/{i['pending']}/"),
            Sample(404, "get", f"/v1/event/{MISSING}/"),
            Sample(200, "get", "/v1/events/"),
            Sample(400, "get", "/v1/events/?status=lost"),
            Sample(200, "get", f"/v1/event/{i['warned']}/"),
            Sample(200, "get", "/v1/events/?warning=true"),
            Sample(400, "get", "/v1/events/?warning=maybe"),
            Sample(404, "get", "/v1/events/?page=99"),
            Sample(201, "post", "/v1/exports/", {"schema": {"type": "object"}, **ALICE}),
            Sample(400, "post", "/v1/exports/", {"filters": {"x": 1}}),
            Sample(200, "post", "/v1/exports/get/", {"memory_export_id": i["export"]}),
            Sample(400, "post", "/v1/exports/get/", {"memory_export_id": "export"}),
            Sample(404, "post", "/v1/exports/get/", {"memory_export_id": str(MISSING)}),
            Sample(
                200, "post", "/v1/graph/traverse/", {"entity": "green tea", "depth": 2, **ALICE}
            ),
            Sample(200, "post", "/v1/graph/traverse/", {**TRAVERSE, "include_invalid": True}),
            Sample(200, "get", "/v2/profiles/settings/"),
            Sample(400, "post", "/v2/profiles/settings/", {"schema": PROFILE_SCHEMA}),
            Sample(200, "post", "/v2/profiles/settings/", PROFILE_SETTINGS),
            Sample(200, "get", "/v2/entities/user/alice/profile/"),
            Sample(400, "get", "/v2/entities/agent/alice/profile/"),
            Sample(404, "get", "/v2/entities/user/nobody/profile/"),
            Sample(202, "post", "/v2/profiles/jobs/", TRIGGER, idempotency_key="profile-1"),
            Sample(202, "post", "/v2/profiles/jobs/", TRIGGER, idempotency_key="profile-1"),
            Sample(
                409,
                "post",
                "/v2/profiles/jobs/",
                {**TRIGGER, "entity_id": "bob"},
                idempotency_key="profile-1",
            ),
            Sample(
                202,
                "post",
                "/v2/profiles/jobs/",
                {"operation": "sample"},
                idempotency_key="profile-2",
            ),
            Sample(400, "post", "/v2/profiles/jobs/", {"operation": "x"}, idempotency_key="prof-3"),
            Sample(
                404,
                "post",
                "/v2/profiles/jobs/",
                {**TRIGGER, "entity_id": "nobody"},
                idempotency_key="profile-4",
            ),
            Sample(200, "get", f"/v2/profiles/jobs/{i['job']}/"),
            Sample(404, "get", f"/v2/profiles/jobs/{MISSING}/"),
            Sample(400, "post", "/v1/graph/traverse/", {"entity": "alice"}),
            Sample(200, "get", "/v1/graph/?user_id=alice&include_invalid=true"),
            Sample(200, "get", "/v1/graph/?user_id=alice&page_size=1"),
            Sample(400, "get", "/v1/graph/?agent_id=*"),
            Sample(404, "get", "/v1/graph/?user_id=alice&page=99"),
            Sample(200, "post", "/v1/users/alice/dashboard-link/", {"expires_in": 600}),
            Sample(400, "post", "/v1/users/alice/dashboard-link/", {"expires_in": 1}),
            # Before the redaction, which erases the summary of the scope it redacts in.
            *self.project_samples(),
            *self.webhook_samples(),
            # After the batch delete of chess: a deleted memory can be redacted too.
            Sample(200, "post", f"/v1/memories/{i['chess']}/redact/", {"reason": "GDPR"}),
            Sample(400, "post", f"{missing}redact/", {"reason": "x" * 501}),
            Sample(404, "post", f"{missing}redact/", {}),
            # Last: reverting the processed request ends the relation the graph samples read.
            Sample(409, "post", f"/v1/event/{i['pending']}/revert/"),
            Sample(200, "post", f"/v1/event/{i['done']}/revert/"),
            Sample(200, "post", f"/v1/event/{i['done']}/revert/"),  # replayed
            Sample(404, "post", f"/v1/event/{MISSING}/revert/"),
        ]
        return table + list(self.every_operation())

    def project_samples(self) -> list[Sample]:
        """The Platform's project, member and summary endpoints (tenants.projects_api)."""
        mine, other = self.alice.key.project, self.charlie.key.project
        orgs = "/api/v1/orgs/organizations/"
        new, elsewhere = (
            f"{orgs}{mine.organization_id}/projects/",
            f"{orgs}{other.organization_id}/projects/",
        )
        here, there = f"{new}{mine.pk}/", f"{elsewhere}{other.pk}/"
        bea = {"email": "bea@example.com"}
        return [
            Sample(200, "get", here),
            Sample(400, "get", f"{here}?fields=nonsense"),
            Sample(404, "get", there),
            Sample(200, "patch", here, {"custom_instructions": "Remember tea."}),
            Sample(400, "patch", here, {"memory_depth": "deep"}),
            Sample(404, "patch", there, {"name": "x"}),
            Sample(403, "delete", here),
            Sample(404, "delete", there),
            Sample(200, "post", new, {"name": "schema-second"}),
            Sample(400, "post", new, {}),
            Sample(404, "post", elsewhere, {"name": "x"}),
            Sample(409, "post", new, {"name": "schema-second"}),
            Sample(409, "patch", here, {"name": "schema-second"}),
            Sample(200, "post", f"{here}members/", bea),
            Sample(409, "post", f"{here}members/", bea),  # already a member
            Sample(400, "post", f"{here}members/", {"email": "bea"}),
            Sample(404, "post", f"{here}members/", {"email": "nobody@example.com"}),
            Sample(404, "post", f"{there}members/", bea),
            Sample(200, "get", f"{here}members/"),
            Sample(404, "get", f"{there}members/"),
            Sample(200, "put", f"{here}members/", {**bea, "role": "OWNER"}),
            Sample(409, "put", f"{here}members/", {**bea, "role": "READER"}),  # the last owner
            Sample(400, "put", f"{here}members/", {**bea, "role": "GOD"}),
            Sample(404, "put", f"{there}members/", {**bea, "role": "READER"}),
            Sample(409, "delete", f"{here}members/?email=bea@example.com"),  # the last owner
            Sample(200, "post", f"{here}members/", {"email": "cid@example.com", "role": "OWNER"}),
            Sample(200, "delete", f"{here}members/?email=bea@example.com"),
            Sample(400, "delete", f"{here}members/?email=bea"),
            Sample(404, "delete", f"{here}members/?email=bea@example.com"),
            Sample(200, "post", "/v1/summary/", ALICE),
            Sample(400, "post", "/v1/summary/", {"filters": {"categories": {"in": ["tea"]}}}),
        ]

    def webhook_samples(self) -> list[Sample]:
        """The Platform's webhook endpoints (webhooks.api)."""
        mine = f"/api/v1/webhooks/projects/{self.alice.key.project_id}/"
        other = f"/api/v1/webhooks/projects/{self.charlie.key.project_id}/"
        kept, deleted = (f"/api/v1/webhooks/{pk}/" for pk in self.webhooks)
        new = {"name": "logger", "url": WEBHOOK_URL, "event_types": ["memory_add"]}
        return [
            Sample(200, "get", mine),
            Sample(404, "get", other),
            Sample(201, "post", mine, new),
            Sample(400, "post", mine, {**new, "url": "http://10.0.0.1/hook"}),
            Sample(404, "post", other, new),
            Sample(200, "put", kept, {"name": "renamed", "is_active": False}),
            Sample(400, "put", kept, {"event_types": ["memory_explode"]}),
            Sample(404, "put", "/api/v1/webhooks/999999999/", {"name": "x"}),
            Sample(200, "delete", deleted),
            Sample(404, "delete", deleted),
        ]

    def every_operation(self) -> Iterator[Sample]:
        """What any operation must answer documentedly: no key, too many requests and, if it
        takes a body, one over the size limit and one that is not JSON."""
        values = {
            "memory_id": self.ids["tea"],
            "event_id": self.ids["done"],
            "erasure_id": self.ids["erasure"],
            "job_id": self.ids["job"],
            "org_id": self.alice.key.project.organization_id,
            "project_id": self.alice.key.project_id,
            "webhook_id": self.webhooks[0],
        }
        for method, path, operation in operations():
            concrete = path.format(**values, entity_type="user", name="alice", user_id="alice")
            takes_body = "requestBody" in operation or (method, path) in UNDECLARED_BODY
            body: dict[str, Any] | None = {} if takes_body else None
            yield Sample(401, method, concrete, body, key=False)
            yield Sample(429, method, concrete, body, fault="throttled")
            if body is not None:
                yield Sample(413, method, concrete, {"pad": "x" * 2000}, fault="body limit")
                yield Sample(415, method, concrete, "I like tea", content_type="text/plain")

    @contextmanager
    def fault(self, fault: str | None) -> Iterator[None]:
        if fault == "embedder down":
            with socket.socket() as closed:
                closed.bind(("127.0.0.1", 0))
                url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
            down = embeddings.OpenAICompatibleEmbedder(url, "m", None, 384)
            with mock.patch.object(embeddings, "_active", (embeddings.configured_space(), down)):
                yield
        elif fault == "throttled":
            rates = {"api_key": "1/minute"}
            rest = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
            with override_settings(REST_FRAMEWORK=rest):
                django_cache.clear()
                self.check(Sample(200, "get", "/v1/ping/"))  # the one request allowed
                yield
        elif fault == "body limit":
            with override_settings(ENGRAM_MAX_BODY_BYTES=1024):
                yield
        elif fault in ("worker", "extraction fails", "erased meanwhile"):
            # The test's one transaction hides the request from a worker process: the wait
            # processes the event itself (the real pipeline), as a worker would meanwhile.
            def waited(project: uuid.UUID, event_id: uuid.UUID, seconds: float) -> Any:
                if fault == "erased meanwhile":
                    actions.do_erase_user(project, "fay", actor="test")
                else:
                    extractor = OfflineExtractor() if fault == "worker" else Refusing()
                    process_event(event_id, project, extractor)
                with project_context(project):
                    return MemoryEvent.objects.filter(pk=event_id).first()

            with mock.patch.object(processed, "finished_event", waited):
                yield
        elif fault == "no worker":
            with override_settings(ENGRAM_SYNC_ADD_WAIT_MS=0):
                yield
        else:
            assert fault is None, fault
            yield

    def check(self, sample: Sample) -> None:
        """Send the sample; its status and body must be as documented."""
        data = sample.body
        if data is None:
            data = ""
        elif sample.content_type == "application/json":
            data = json.dumps(data)
        headers = auth(self.alice.raw) if sample.key else {}
        if sample.idempotency_key:
            headers["Idempotency-Key"] = sample.idempotency_key
        response = self.client.generic(
            sample.method.upper(), sample.path, data, sample.content_type, headers=headers
        )
        method, path, status = sample.covers()
        where = f"{method.upper()} {sample.path}"
        assert response.status_code == status, (where, response.status_code, response.content)
        documented = openapi()["paths"][path][method]["responses"].get(str(status))
        assert documented is not None, f"{where}: {status} is not documented"
        for header, spec in documented.get("headers", {}).items():
            # A header documented as optional (Engram-Foreign-Language) is sent when it applies.
            if spec.get("required") or header == "Engram-Best-Score":
                assert response.has_header(header), f"{where}: no {header} header"
        body: Any = response.json()
        schema = documented["content"]["application/json"]["schema"]
        assert not problems(body, schema), (where, status, problems(body, schema), body)
        # An empty list proves nothing about its items: lists, pages and search results have some.
        if (
            isinstance(body, dict)
            and ("count" in body or "nothing_relevant" in body)
            and ("results" in body)
        ):
            body = body["results"]
        assert body != [], f"{where}: no items to check"

    def check_all(self, fault: str | None) -> None:
        samples = [s for s in self.samples() if s.fault == fault]
        assert samples
        with self.fault(fault):
            for sample in samples:
                self.check(sample)

    def test_sample_requests_get_documented_answers(self) -> None:
        self.check_all(None)

    def test_a_throttled_key_gets_a_documented_429_everywhere(self) -> None:
        self.check_all("throttled")

    def test_an_oversized_body_gets_a_documented_413_everywhere(self) -> None:
        self.check_all("body limit")

    def test_synchronous_adds_get_documented_answers(self) -> None:
        for fault in ("worker", "no worker", "extraction fails", "erased meanwhile"):
            self.check_all(fault)

    def test_the_embedder_down_gets_a_documented_503_where_text_is_embedded(self) -> None:
        self.check_all("embedder down")

    def test_every_documented_status_is_exercised(self) -> None:
        documented = {(m, p, int(code)) for m, p, op in operations() for code in op["responses"]}
        exercised = {sample.covers() for sample in self.samples()}
        assert documented - exercised - set(NEEDS_A_LIVE_FAULT) == set()
        assert exercised <= documented

    def test_the_dict_builders_give_the_documented_keys_in_order(self) -> None:
        with project_context(self.alice.key.project_id):
            memory = Memory.objects.get(pk=self.ids["tea"])
            row = MemoryHistory.objects.filter(memory_id=memory.pk).first()
            event = MemoryEvent.objects.get(pk=self.ids["done"])
        assert row is not None
        assert event.results  # the processed add: its results are checked by the samples too
        assert list(memory_data(memory, [])) == list(r.MemorySerializer().fields)
        assert list(history_data(row)) == list(r.HistoryEntrySerializer().fields)
        assert list(event_data(event)) == list(r.EventSerializer().fields)

    def test_an_undocumented_or_missing_key_breaks_the_contract(self) -> None:
        with project_context(self.alice.key.project_id):
            body = memory_data(Memory.objects.get(pk=self.ids["tea"]))
        assert problems(body, component("Memory")) == []
        assert problems({**body, "surprise": 1}, component("Memory"))
        assert problems({k: v for k, v in body.items() if k != "hash"}, component("Memory"))
        assert problems({**body, "user_id": None}, component("Memory")) == []
        assert problems({**body, "memory": None}, component("Memory"))
