from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import TestCase

from tenants.models import ApiKey, Organization, Project, hash_key
from tests.factory import auth


def create_key(*args: str) -> list[str]:
    out = StringIO()
    call_command("create_api_key", *args, stdout=out)
    return out.getvalue().strip().splitlines()


class CreateApiKeyTestCase(TestCase):
    def test_it_prints_a_working_key_as_the_last_line(self) -> None:
        lines = create_key("--org", "acme", "--project", "main", "--name", "ci")
        raw = lines[-1]
        response = self.client.get("/v1/ping/", headers=auth(raw))
        assert response.status_code == 200
        project = Project.objects.get(name="main", organization__name="acme")
        assert response.json()["project_id"] == str(project.id)

    def test_it_stores_only_a_hash(self) -> None:
        raw = create_key("--org", "acme", "--project", "main")[-1]
        key = ApiKey.objects.get()
        assert key.key_hash == hash_key(raw)
        assert raw not in (key.key_hash, key.prefix)
        assert raw.startswith(key.prefix)

    def test_it_reuses_an_existing_org_and_project(self) -> None:
        create_key("--org", "acme", "--project", "main")
        create_key("--org", "acme", "--project", "main")
        create_key("--org", "acme", "--project", "other")
        assert Organization.objects.count() == 1
        assert Project.objects.count() == 2
        assert ApiKey.objects.count() == 3

    def test_it_prints_only_the_key_when_quiet(self) -> None:
        lines = create_key("--org", "acme", "--project", "main", "--verbosity", "0")
        assert len(lines) == 1
        assert lines[0].startswith("eng_")

    def test_it_refuses_an_empty_name(self) -> None:
        with pytest.raises(CommandError):
            create_key("--org", " ", "--project", "main")
        assert Organization.objects.count() == 0

    def test_it_refuses_an_unknown_user(self) -> None:
        with pytest.raises(CommandError, match="No user named"):
            create_key("--org", "acme", "--project", "main", "--user", "nobody")
        assert ApiKey.objects.count() == 0
