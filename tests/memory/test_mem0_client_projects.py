"""The official mem0ai client's project, member and summary methods against a live server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from memory.models import ScopeSummary
from tenants.db import project_context
from tenants.models import Membership, Project
from tests.factory import make_key


@pytest.fixture
def client(live_api: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    monkeypatch.setenv("MEM0_TELEMETRY", "False")
    monkeypatch.setenv("MEM0_DIR", str(tmp_path))
    from mem0 import MemoryClient

    owner = get_user_model().objects.create_user("owen", email="owen@example.com")
    key = make_key("acme", "client-test", created_by=owner)  # an owner's key
    Membership.objects.create(organization=key.key.project.organization, user=owner, role="owner")
    client = MemoryClient(host=live_api, api_key=key.raw)
    yield client
    client.client.close()


def project_of(client: Any) -> Project:
    return Project.objects.get(pk=client.project_id)


def test_it_reads_and_updates_the_project(client: Any) -> None:
    assert client.get_project(fields=["name", "decay"]) == {"name": "client-test", "decay": False}
    answer = client.update_project(custom_instructions="Only remember food.")
    assert answer == {"message": "Project updated successfully"}
    client.project.update(custom_categories=[{"travel": "Trips"}], decay=False)
    project = project_of(client)
    assert project.custom_instructions == "Only remember food."
    assert project.custom_categories == [{"travel": "Trips"}]
    body = client.project.get()
    assert (body["custom_instructions"], body["user_role"]) == ("Only remember food.", "OWNER")


def test_it_refuses_what_engram_cannot_honour(client: Any) -> None:
    from mem0.exceptions import ValidationError

    with pytest.raises(ValidationError, match="memory_depth"):
        client.update_project(memory_depth="deep")
    with pytest.raises(ValidationError, match="decay"):
        client.project.update(decay=True)
    assert project_of(client).custom_instructions == ""


def test_it_creates_a_project_in_the_organization(client: Any) -> None:
    created = client.project.create("second", description="For tests")
    project = Project.objects.get(pk=created["project_id"])
    assert (project.name, project.organization_id) == ("second", project_of(client).organization_id)


def test_it_manages_members(client: Any) -> None:
    users = get_user_model().objects
    users.create_user("olga", email="olga@example.com")
    users.create_user("bob", email="bob@example.com")
    client.project.add_member("olga@example.com", role="OWNER")
    client.project.add_member("bob@example.com")
    members = client.project.get_members()["members"]
    assert [(m["email"], m["role"]) for m in members] == [
        ("bob@example.com", "READER"),
        ("olga@example.com", "OWNER"),
        ("owen@example.com", "OWNER"),
    ]
    client.project.update_member("bob@example.com", "OWNER")
    assert Membership.objects.get(user__username="bob").role == "owner"
    client.project.remove_member("bob@example.com")
    assert [m["email"] for m in client.project.get_members()["members"]] == [
        "olga@example.com",
        "owen@example.com",
    ]


def test_it_refuses_to_delete_the_project(client: Any) -> None:
    from mem0.exceptions import AuthenticationError

    with pytest.raises(AuthenticationError, match="admin"):
        client.project.delete()
    assert Project.objects.filter(pk=client.project_id).exists()


def test_it_answers_the_summaries(client: Any) -> None:
    project_id = project_of(client).pk
    with project_context(project_id):
        ScopeSummary.objects.create(project_id=project_id, user_id="alice", text="Alice sails.")
    [row] = client.get_summary(filters={"user_id": "alice"})
    assert (row["user_id"], row["summary"]) == ("alice", "Alice sails.")
    assert client.get_summary(filters={"user_id": "bob"}) == []
    assert [row["user_id"] for row in client.get_summary()] == ["alice"]  # no filters: all
