"""Row-level security is the second wall: raw SQL, with no ORM filter, still sees one tenant."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from audit.models import AccessLog, ErasureRequest, PurgeRecord
from memory.models import (
    EntityVector,
    Feedback,
    IdempotentRequest,
    MemoryEntity,
    MemoryEvent,
    MemoryExport,
    MemoryHistory,
    ProfileJob,
    ProfileSettings,
    RerankUsageDay,
    ScopeSummary,
    UsageDay,
    UserProfile,
)
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import make_memory
from webhooks.models import Delivery, Webhook

# Tables that carry project_id but are deliberately not under RLS, with the reason.
RLS_EXEMPT = {
    "tenants_apikey": "a key is looked up by its prefix before its project is known; holds hashes",
}

# One builder per tenant-scoped table. A new tenant table without an entry here fails
# test_it_covers_every_tenant_table, so its isolation is tested the day it is added.
ROW_FACTORIES: dict[str, Callable[[uuid.UUID], Any]] = {
    "audit_accesslog": lambda project_id: AccessLog.objects.create(
        project_id=project_id, request_id="r", method="GET", path="/", status=200, duration_ms=1
    ),
    "audit_purgerecord": lambda project_id: PurgeRecord.objects.create(
        project_id=project_id, subject_kind="user", subject_hash="0" * 64, actor="test"
    ),
    "audit_erasurerequest": lambda project_id: ErasureRequest.objects.create(
        project_id=project_id, subject_hash="0" * 64, subject_id="alice", actor="test"
    ),
    "memory_memory": make_memory,
    "memory_memoryhistory": lambda project_id: MemoryHistory.objects.create(
        project_id=project_id, memory_id=uuid.uuid4(), event="ADD", new_memory="x", actor="test"
    ),
    "memory_feedback": lambda project_id: Feedback.objects.create(
        project_id=project_id, memory=make_memory(project_id), feedback="POSITIVE"
    ),
    "memory_memoryexport": lambda project_id: MemoryExport.objects.create(
        project_id=project_id, result=[]
    ),
    "memory_memoryevent": lambda project_id: MemoryEvent.objects.create(
        project_id=project_id, payload={"messages": []}
    ),
    "memory_scopesummary": lambda project_id: ScopeSummary.objects.create(
        project_id=project_id, user_id="alice", text="x"
    ),
    "memory_memoryentity": lambda project_id: MemoryEntity.objects.create(
        project_id=project_id, memory=make_memory(project_id), entity_name="x", user_id="alice"
    ),
    "memory_entityvector": lambda project_id: EntityVector.objects.create(
        project_id=project_id, entity_name="x", embedding=[0.1] * 384, user_id="alice"
    ),
    "memory_idempotentrequest": lambda project_id: IdempotentRequest.objects.create(
        project_id=project_id, key="retry-key-1", body_hash="0" * 64, status=200, response={}
    ),
    "memory_usageday": lambda project_id: UsageDay.objects.create(
        project_id=project_id, day="2026-11-27", events=1
    ),
    "memory_rerankusageday": lambda project_id: RerankUsageDay.objects.create(
        project_id=project_id, day="2026-12-03", searches=1
    ),
    "memory_profilesettings": lambda project_id: ProfileSettings.objects.create(
        project_id=project_id, enabled=True
    ),
    "memory_userprofile": lambda project_id: UserProfile.objects.create(
        project_id=project_id, user_id="alice", profile={"name": "Alice"}
    ),
    "memory_profilejob": lambda project_id: ProfileJob.objects.create(
        project_id=project_id, operation="trigger", entity_ids=["alice"], idempotency_key="k" * 8
    ),
    "webhooks_webhook": lambda project_id: Webhook.objects.create(
        project_id=project_id, name="h", url="https://example.com/h", secret="s"
    ),
    "webhooks_delivery": lambda project_id: Delivery.objects.create(
        project_id=project_id,
        webhook=Webhook.objects.create(project_id=project_id, url="https://x/", secret="s"),
        event_type="memory_add",
        next_attempt_at="2026-11-27T00:00:00Z",
    ),
}


def tenant_tables() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND column_name = 'project_id'"
        )
        return {row[0] for row in cursor.fetchall()}


def project_ids_in(table: str) -> list[uuid.UUID]:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT project_id FROM "{table}"')  # noqa: S608 - table names from the catalog
        return [row[0] for row in cursor.fetchall()]


class RowLevelSecurityTestCase(BaseTestCase):
    def setUp(self) -> None:
        self.a = self.alice.key.project_id
        self.b = self.charlie.key.project_id
        for table, make in ROW_FACTORIES.items():
            for project_id in (self.a, self.b):
                with project_context(project_id):
                    make(project_id)
            assert table

    def test_it_runs_as_a_role_that_cannot_bypass_rls(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
            )
            assert cursor.fetchone() == (False, False)

    def test_it_covers_every_tenant_table(self) -> None:
        assert tenant_tables() - RLS_EXEMPT.keys() == ROW_FACTORIES.keys()

    def test_it_enables_and_forces_rls_with_a_policy_on_every_tenant_table(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
                "(SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid) "
                "FROM pg_class c WHERE c.relname = ANY(%s)",
                [sorted(tenant_tables() - RLS_EXEMPT.keys())],
            )
            rows = cursor.fetchall()
        assert rows
        for name, enabled, forced, policies in rows:
            assert (enabled, forced) == (True, True), name
            assert policies >= 1, name

    def test_it_shows_one_project_only_its_own_rows(self) -> None:
        for table in ROW_FACTORIES:
            with project_context(self.a):
                seen = project_ids_in(table)
            assert seen, table
            assert set(seen) == {self.a}, table

    def test_it_shows_nothing_without_a_tenant_context(self) -> None:
        for table in ROW_FACTORIES:
            assert project_ids_in(table) == [], table

    def test_it_refuses_to_write_a_row_for_another_project(self) -> None:
        for table, make in ROW_FACTORIES.items():
            with pytest.raises(DatabaseError, match="row-level security"), project_context(self.a):
                make(self.b)
            assert table

    def test_it_refuses_to_write_without_a_tenant_context(self) -> None:
        for make in ROW_FACTORIES.values():
            with pytest.raises(DatabaseError, match="row-level security"), transaction.atomic():
                make(self.a)

    def test_it_restores_the_outer_tenant_after_a_nested_context(self) -> None:
        with project_context(self.a):
            with project_context(self.b):
                assert set(project_ids_in("audit_accesslog")) == {self.b}
            assert set(project_ids_in("audit_accesslog")) == {self.a}
