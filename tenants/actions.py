"""Writes to the tenant tables: each function is one transaction."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from tenants.models import ApiKey, Membership, Organization, Project

logger = logging.getLogger(__name__)


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


# -- project settings and members (the API's /api/v1/orgs/… and the dashboard's Settings page) --

# What an operator may change of a project, by the API's and the dashboard's names alike.
PROJECT_SETTINGS = (
    "name",
    "description",
    "custom_instructions",
    "custom_categories",
    "includes",
    "excludes",
    "deleted_retention_days",
    "event_retention_days",
)


class MemberNotFoundError(LookupError):
    """No membership of that email in the organization (the API answers 404)."""


class UnknownUserError(LookupError):
    """No engram user has that email (the API answers 404): engram sends no invitations."""


class ConflictError(ValueError):
    """The change conflicts with the organization as it is (the API answers 409)."""


class NameTakenError(ConflictError):
    """Another project of the organization has the name."""


@transaction.atomic
def do_update_project_settings(project: Project, changes: dict[str, Any]) -> Project:
    """Apply validated `changes` (keys of PROJECT_SETTINGS) to the project; the new name must be
    free in its organization. Returns the project as saved."""
    unknown = set(changes) - set(PROJECT_SETTINGS)
    if unknown:
        raise ValueError(f"not project settings: {sorted(unknown)}")
    locked = Project.objects.select_for_update().get(pk=project.pk)
    name = changes.get("name")
    if name is not None and name != locked.name:
        _check_name_free(locked.organization_id, name)
    for field, value in changes.items():
        setattr(locked, field, value)
    if changes:
        locked.save(update_fields=list(changes))
    logger.info("project %s settings changed: %s", locked.pk, ", ".join(sorted(changes)))
    return locked


def _check_name_free(organization_id: uuid.UUID, name: str) -> None:
    if Project.objects.filter(organization_id=organization_id, name=name).exists():
        raise NameTakenError(f"name: the organization already has a project named {name!r}.")


@transaction.atomic
def do_create_project(organization: Organization, *, name: str, description: str = "") -> Project:
    """A new project in `organization`, with the default settings and no keys."""
    Organization.objects.select_for_update().get(pk=organization.pk)  # one create at a time
    _check_name_free(organization.pk, name)
    project = Project.objects.create(organization=organization, name=name, description=description)
    logger.info("project %s created in organization %s", project.pk, organization.pk)
    return project


def _user_by_email(email: str) -> User:
    users = list(User.objects.filter(email__iexact=email, is_active=True)[:2])
    if not users:
        raise UnknownUserError(
            f"No engram user has the email {email!r}. engram sends no invitations: an "
            "operator creates the user first (Django admin or manage.py createsuperuser)."
        )
    if len(users) > 1:
        raise ConflictError(f"email: more than one engram user has the email {email!r}.")
    return users[0]


def _membership(organization: Organization, email: str) -> Membership:
    found = (
        Membership.objects.select_for_update()
        .select_related("user")
        .filter(organization=organization, user__email__iexact=email)
        .first()
    )
    if found is None:
        raise MemberNotFoundError(email)
    return found


def _check_keeps_an_owner(membership: Membership, new_role: str | None) -> None:
    """Refuse to demote or remove the organization's last owner (no one could manage it)."""
    if membership.role != Membership.Role.OWNER or new_role == Membership.Role.OWNER:
        return
    owners = Membership.objects.select_for_update().filter(
        organization_id=membership.organization_id, role=Membership.Role.OWNER
    )
    if len(owners) <= 1:
        raise ConflictError("email: this is the organization's last owner; make another first.")


@transaction.atomic
def do_add_member(organization: Organization, *, email: str, role: str) -> Membership:
    """Make the existing user with this email a member of the organization with `role`."""
    user = _user_by_email(email)
    existing = Membership.objects.filter(organization=organization, user=user).first()
    if existing is not None:
        raise ConflictError(
            f"email: {email!r} is already a member ({existing.role}); change the role instead."
        )
    membership = Membership.objects.create(organization=organization, user=user, role=role)
    logger.info("user %s added to organization %s as %s", user.pk, organization.pk, role)
    return membership


@transaction.atomic
def do_update_member(organization: Organization, *, email: str, role: str) -> Membership:
    membership = _membership(organization, email)
    _check_keeps_an_owner(membership, role)
    membership.role = role
    membership.save(update_fields=["role"])
    logger.info("user %s is %s in organization %s", membership.user_id, role, organization.pk)
    return membership


@transaction.atomic
def do_remove_member(organization: Organization, *, email: str) -> None:
    membership = _membership(organization, email)
    _check_keeps_an_owner(membership, None)
    membership.delete()
    logger.info("user %s removed from organization %s", membership.user_id, organization.pk)
