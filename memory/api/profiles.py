"""User profiles (the Platform's /v2/ profile API): one user's profile, generation jobs, the
project's settings. Profiles are built by the worker (memory.extraction.profiles), never on the
request path; these views read them and queue jobs.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound, Throttled
from rest_framework.request import Request
from rest_framework.response import Response

from audit.access import note_access
from memory.actions import UNSET
from memory.actions import profiles as write
from memory.api import responses as r
from memory.api import serializers as s
from memory.api.common import tenant
from memory.api.idempotency import HEADER, IdempotencyConflict, answer_once, idempotency_key
from memory.api.serializers import profiles as ps
from memory.models import ProfileJob, ProfileSettings, UserProfile
from memory.queries import profiles as read
from tenants.api import Closed
from tenants.authentication import request_key
from tenants.projects_api import EDITORS, require_role

# A sample run again within this many seconds of the last one is refused (429).
SAMPLE_COOLDOWN_SECONDS = 60
# The fewest active memories a sampled user has (as memory.extraction.profiles requires).
SAMPLE_MIN_MEMORIES = 3
STATUSES = [*UserProfile.Status.values, "not_enabled"]


def one_of(values: list[str]) -> serializers.CharField:
    """A string of `values`, listed in its description (an enum would need a name override:
    fields named "status" elsewhere hold other values)."""
    return serializers.CharField(help_text="One of: " + ", ".join(values) + ".")


class ProfileSerializer(Closed):
    profile = serializers.DictField(
        child=serializers.JSONField(), help_text="The fields of the schema; {} unless succeeded."
    )
    status = one_of(STATUSES)
    entity_type = serializers.CharField(help_text='Always "user".')
    entity_id = serializers.CharField()
    updated_at = serializers.DateTimeField(allow_null=True)
    generation_count = serializers.IntegerField()


class ProfileJobCreatedSerializer(Closed):
    job_id = serializers.UUIDField()
    status = one_of(ProfileJob.Status.values)
    status_url = serializers.CharField(help_text="GET it for the job's progress.")
    operation = one_of(ProfileJob.Operation.values)
    entity_type = serializers.CharField(help_text='Always "user".')
    entity_count_reserved = serializers.IntegerField()
    event_id = serializers.UUIDField(allow_null=True, help_text="Always null.")
    replayed = serializers.BooleanField(help_text="The Idempotency-Key's earlier job.")
    sampled = serializers.IntegerField(required=False, help_text="sample: how many users.")
    entity_ids = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="sample: the users picked."
    )


class ProfileJobStateSerializer(Closed):
    id = serializers.UUIDField()
    operation = one_of(ProfileJob.Operation.values)
    entity_type = serializers.CharField(help_text='Always "user".')
    status = one_of(ProfileJob.Status.values)
    total = serializers.IntegerField(allow_null=True)
    completed = serializers.IntegerField(help_text="succeeded + failed + skipped")
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    skipped = serializers.IntegerField(help_text="Users with too few memories.")
    created_at = serializers.DateTimeField()
    completed_at = serializers.DateTimeField(allow_null=True)


class ProfileJobSerializer(Closed):
    job = ProfileJobStateSerializer()


class UserProfileSettingsSerializer(Closed):
    schema = serializers.DictField(child=serializers.JSONField(), allow_null=True)
    custom_instructions = serializers.CharField(allow_null=True)


class EntitySettingsSerializer(Closed):
    user = UserProfileSettingsSerializer()


class CapabilitiesSerializer(Closed):
    full_rebuild = serializers.BooleanField(help_text="Always false (not available).")


class ProfileSettingsSerializer(Closed):
    enabled = serializers.BooleanField()
    entities = EntitySettingsSerializer()
    capabilities = CapabilitiesSerializer()


NOT_ENABLED = (
    "Profiles are not enabled for this project: POST /v2/profiles/settings/ with "
    "enabled=true and entities.user.schema first."
)


def configured(found: ProfileSettings) -> bool:
    return bool(found.enabled and (found.schema or {}).get("properties"))


def profile_data(user_id: str, found: ProfileSettings, row: UserProfile | None) -> dict[str, Any]:
    status = "not_enabled" if not configured(found) else (row.status if row else "pending")
    succeeded = row is not None and status == UserProfile.Status.SUCCEEDED
    return {
        "profile": row.profile if row is not None and succeeded else {},
        "status": status,
        "entity_type": "user",
        "entity_id": user_id,
        "updated_at": row.updated_at.isoformat() if row and row.updated_at else None,
        "generation_count": row.generation_count if row else 0,
    }


def job_created(job: ProfileJob, replayed: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "job_id": str(job.id),
        "status": job.status,
        "status_url": f"/v2/profiles/jobs/{job.id}/",
        "operation": job.operation,
        "entity_type": "user",
        "entity_count_reserved": len(job.entity_ids),
        "event_id": None,
        "replayed": replayed,
    }
    if job.operation == ProfileJob.Operation.SAMPLE:
        data |= {"sampled": len(job.entity_ids), "entity_ids": list(job.entity_ids)}
    return data


def job_state(job: ProfileJob) -> dict[str, Any]:
    return {
        "id": str(job.id),
        "operation": job.operation,
        "entity_type": "user",
        "status": job.status,
        "total": len(job.entity_ids),
        "completed": job.succeeded + job.failed + job.skipped,
        "succeeded": job.succeeded,
        "failed": job.failed,
        "skipped": job.skipped,
        "created_at": job.created_at.isoformat(),
        "completed_at": job.completed_at.isoformat() if job.completed_at else None,
    }


def settings_data(found: ProfileSettings) -> dict[str, Any]:
    user = {"schema": found.schema, "custom_instructions": found.custom_instructions}
    return {
        "enabled": found.enabled,
        "entities": {"user": user},
        "capabilities": {"full_rebuild": False},
    }


def user_in_path(entity_type: str, name: str) -> str:
    if entity_type != "user":
        raise serializers.ValidationError("Only user profiles exist; use /v2/entities/user/…")
    try:
        return s.scope_id(name)
    except s.ScopeIdError as exc:
        raise serializers.ValidationError(f"A user id {exc}") from None


@extend_schema(
    responses=r.answers(
        {200: ProfileSerializer},
        errors={400: "Not a user, or an id no memory can have.", 404: "No such user here."},
    ),
    parameters=[
        OpenApiParameter("entity_type", str, OpenApiParameter.PATH, enum=["user"]),
        OpenApiParameter("name", str, OpenApiParameter.PATH, description="The user id."),
        r.RETRY_AFTER,
    ],
    summary="A user's profile (status: succeeded, pending, failed, not_enabled, insufficient_data)",
)
@api_view(["GET"])
def user_profile(request: Request, entity_type: str, name: str) -> Response:
    user_id = user_in_path(entity_type, name)
    with tenant(request) as project:
        if not read.user_is_known(project, user_id):
            raise NotFound()
        data = profile_data(
            user_id, read.profile_settings(project), read.user_profile(project, user_id)
        )
        note_access(request, scope={"user_id": user_id}, result_count=1)
    return Response(data)


@extend_schema(
    request=ps.ProfileJobRequestSerializer,
    responses=r.answers(
        {202: ProfileJobCreatedSerializer},
        body=True,
        errors={404: "No such user here (trigger).", 409: r.KEY_REUSED},
    ),
    parameters=[
        OpenApiParameter(
            HEADER,
            str,
            OpenApiParameter.HEADER,
            required=True,
            pattern=r"^[A-Za-z0-9._:-]{8,128}$",
            description="Required. The same key with the same request (path and JSON body) "
            "returns the same job (`replayed: true`); with another request, 409.",
        ),
        r.RETRY_AFTER,
    ],
    summary="Generate profiles: one user now (trigger), or a few users (sample)",
)
@api_view(["POST"])
def create_job(request: Request) -> Response:
    serializer = ps.ProfileJobRequestSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    key = idempotency_key(request)
    if key is None:
        raise serializers.ValidationError({HEADER: "is required (8 to 128 characters)."})
    with tenant(request, status=202) as project:
        # The adds' Idempotency-Key record: the same request replays, another one is a 409.
        return answer_once(
            request,
            key,
            lambda: new_job(request, project, data, key),
            replay=lambda body: replayed_job(project, body),
        )


def new_job(request: Request, project: uuid.UUID, data: dict[str, Any], key: str) -> Response:
    if read.profile_job_by_key(project, key) is not None:
        # The key's record is gone (ENGRAM_IDEMPOTENCY_HOURS), its job is not: a key names one
        # job for good, and what it was asked with can no longer be compared.
        raise IdempotencyConflict()
    if not configured(read.profile_settings(project)):
        raise serializers.ValidationError(NOT_ENABLED)
    users = job_users(project, data)
    job, replayed = write.do_create_profile_job(project, data["operation"], users, key)
    note_access(request, result_count=len(users))
    return Response(job_created(job, replayed), status=202)


def replayed_job(project: uuid.UUID, first: dict[str, Any]) -> dict[str, Any]:
    """The first answer's job as it is now, replayed (as first answered, if it is gone)."""
    job = read.profile_job(project, uuid.UUID(first["job_id"]))
    return job_created(job, True) if job is not None else {**first, "replayed": True}


def job_users(project: uuid.UUID, data: dict[str, Any]) -> list[str]:
    if data["operation"] == ProfileJob.Operation.TRIGGER:
        if not read.user_is_known(project, data["entity_id"]):
            raise NotFound()
        return [data["entity_id"]]
    last = read.last_sample(project)
    if last is not None:
        wait = last.created_at + timedelta(seconds=SAMPLE_COOLDOWN_SECONDS) - timezone.now()
        if wait.total_seconds() > 0:
            raise Throttled(
                wait=wait.total_seconds(), detail="A sample ran less than a minute ago."
            )
    limit = data.get("limit") or ps.SAMPLE_DEFAULT
    return read.sample_users(project, limit, SAMPLE_MIN_MEMORIES)


@extend_schema(
    responses=r.answers({200: ProfileJobSerializer}, errors={404: "No such job here."}),
    parameters=[r.RETRY_AFTER],
    summary="A profile job's progress",
)
@api_view(["GET"])
def job_detail(request: Request, job_id: uuid.UUID) -> Response:
    with tenant(request) as project:
        job = read.profile_job(project, job_id)
        if job is None:
            raise NotFound()
        note_access(request, result_count=1)
    return Response({"job": job_state(job)})


@extend_schema(
    methods=["GET"],
    responses=r.answers({200: ProfileSettingsSerializer}),
    parameters=[r.RETRY_AFTER],
    summary="The project's profile settings",
)
@extend_schema(
    methods=["POST"],
    request=ps.ProfileSettingsRequestSerializer,
    responses=r.answers(
        {200: ProfileSettingsSerializer},
        body=True,
        errors={403: "The key's creator is not an owner or admin of the organization."},
    ),
    parameters=[r.RETRY_AFTER],
    summary="Change the profile settings (only the fields sent; null clears one)",
)
@api_view(["GET", "POST"])
def profile_settings(request: Request) -> Response:
    if request.method == "GET":
        with tenant(request) as project:
            found = read.profile_settings(project)
        return Response(settings_data(found))
    serializer = ps.ProfileSettingsRequestSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    require_role(request_key(request), EDITORS, "change the profile settings")
    data = serializer.validated_data
    user = data.get("entities") or {}
    with tenant(request) as project:
        found = write.do_update_profile_settings(
            project,
            enabled=data.get("enabled"),
            schema=user.get("schema", UNSET),
            custom_instructions=user.get("custom_instructions", UNSET),
        )
    return Response(settings_data(found))
