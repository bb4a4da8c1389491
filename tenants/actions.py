"""Writes to the tenant tables: each function is one transaction."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction

from tenants.models import ApiKey, Organization, Project


@dataclass(frozen=True)
class NewApiKey:
    key: ApiKey
    raw: str  # shown once; only its hash is stored


@transaction.atomic
def do_create_api_key(
    *,
    org_name: str,
    project_name: str,
    name: str = "default",
    created_by: User | None = None,
) -> NewApiKey:
    """Create a key for org/project, creating the organization and project if they are new."""
    organization, _ = Organization.objects.get_or_create(name=org_name)
    project, _ = Project.objects.get_or_create(organization=organization, name=project_name)
    return do_create_project_key(project, name=name, created_by=created_by)


@transaction.atomic
def do_create_project_key(
    project: Project, *, name: str, created_by: User | None = None
) -> NewApiKey:
    """Create a key for an existing project (the operator dashboard); the raw key is in the
    result only."""
    raw, prefix, key_hash = ApiKey.generate()
    key = ApiKey.objects.create(
        project=project, name=name, prefix=prefix, key_hash=key_hash, created_by=created_by
    )
    return NewApiKey(key=key, raw=raw)


@transaction.atomic
def do_revoke_api_key(key: ApiKey) -> None:
    key.revoke()
