"""The Mem0 Platform's project and member endpoints, on engram's project and organization.

    GET, PATCH, DELETE  /api/v1/orgs/organizations/{org_id}/projects/{project_id}/
    POST                /api/v1/orgs/organizations/{org_id}/projects/
    GET, POST, PUT, DELETE  …/projects/{project_id}/members/

An API key belongs to one project: any other organization or project in the path is a 404,
like any object the key cannot see. A key acts with its creator's current role in the
organization (a key made with `manage.py create_api_key` has no creator and acts as an admin:
it may change the project's settings, never who is in the organization, since an application's
key that leaks must not hand out dashboard access). Owners and admins change settings and
create projects (and webhooks and profile settings: require_role), owners manage members,
every key reads. Engram's members belong to the organization (as on the dashboard), so the
member endpoints list and change the organization's members. Deleting a whole project
through an API key is refused (403): see delete_project.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.exceptions import APIException, NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from tenants import actions
from tenants import project_serializers as s
from tenants.api import ErrorSerializer
from tenants.authentication import request_key
from tenants.models import ApiKey, Membership, Project

EDITORS = (Membership.Role.OWNER, Membership.Role.ADMIN)
DELETE_REFUSED = (
    "engram does not delete a whole project through an API key (every memory, event and key "
    "of it would be gone at once). An operator deletes it in the Django admin "
    "(/admin/tenants/project/); to remove data, delete users or memories through the API."
)


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The change conflicts with the organization as it is."


def key_role(key: ApiKey) -> str | None:
    """The role the key acts with: its creator's in the key's organization, now."""
    creator = key.created_by
    if creator is None:
        # Made at the server (manage.py create_api_key): no person behind it, so it may change
        # settings but not the organization's members.
        return Membership.Role.ADMIN
    if not creator.is_active:
        return None
    if creator.is_superuser:
        return Membership.Role.OWNER
    found: str | None = (
        Membership.objects.filter(user=creator, organization_id=key.project.organization_id)
        .values_list("role", flat=True)
        .first()
    )
    return found


def require_role(key: ApiKey, roles: tuple[str, ...], what: str) -> None:
    """403 unless the key acts with one of `roles` (key_role). The one check of a key's role:
    the project and member endpoints, webhooks and the profile settings use it alike."""
    if key_role(key) not in roles:
        raise PermissionDenied(
            f"This API key may not {what}: it acts with its creator's role in the organization, "
            f"and that needs {' or '.join(s.ROLE_WORDS[r] for r in roles)}."
        )


def _same(value: str, expected: uuid.UUID) -> bool:
    try:
        return uuid.UUID(value) == expected
    except ValueError:
        return False


def key_project(request: Request, org_id: str, project_id: str | None = None) -> Project:
    """The key's project if the path names it (and its organization); else 404."""
    key = request_key(request)
    project = key.project
    if not _same(org_id, project.organization_id) or (
        project_id is not None and not _same(project_id, project.pk)
    ):
        raise NotFound()
    return Project.objects.select_related("organization").get(pk=project.pk)


def member_rows(project: Project) -> list[dict[str, str]]:
    rows = Membership.objects.filter(organization_id=project.organization_id).select_related("user")
    return [
        {"username": m.user.get_username(), "email": m.user.email, "role": s.ROLE_WORDS[m.role]}
        for m in rows.order_by("user__username")
    ]


def project_body(project: Project, key: ApiKey, fields: list[str] | None) -> dict[str, Any]:
    role = key_role(key)
    body: dict[str, Any] = {
        "project_id": str(project.pk),
        "name": project.name,
        "description": project.description,
        "created_at": project.created_at.isoformat(),
        "members": member_rows(project) if not fields or "members" in fields else [],
        "user_role": s.ROLE_WORDS.get(role) if role else None,
        "custom_instructions": project.custom_instructions,
        "custom_categories": project.custom_categories,
        "includes": project.includes,
        "excludes": project.excludes,
        "deleted_retention_days": project.deleted_retention_days,
        "event_retention_days": project.event_retention_days,
        **s.fixed_settings(),
    }
    return {k: v for k, v in body.items() if k in fields} if fields else body


def requested_fields(request: Request) -> list[str] | None:
    """`fields`, repeated (fields=a&fields=b, as the clients send a list) or comma-separated."""
    names = [n.strip() for v in request.query_params.getlist("fields") for n in v.split(",")]
    names = [n for n in names if n]
    unknown = [n for n in names if n not in s.PROJECT_FIELDS]
    if unknown:
        raise serializers.ValidationError(
            {"fields": f"unknown field {unknown[0]!r}; known: {', '.join(s.PROJECT_FIELDS)}."}
        )
    return names or None


def _check_address(data: dict[str, Any], project: Project) -> None:
    """The 1.x clients repeat org_id and project_id in the body: they must be the path's."""
    for key, expected in (("org_id", project.organization_id), ("project_id", project.pk)):
        if key in data and not _same(str(data[key]), expected):
            raise serializers.ValidationError({key: "is not the project of the path."})


FIELDS_PARAMETER = OpenApiParameter(
    "fields",
    str,
    many=True,
    enum=s.PROJECT_FIELDS,
    description="Only these keys of the project (repeat it, or separate names with commas).",
)
REASONS = {
    400: "Invalid input: `detail` names the first problem (a setting engram cannot honour too).",
    401: "No API key, or an invalid or revoked one.",
    403: "The key's creator lacks the role this needs (OWNER or ADMIN; OWNER for members).",
    404: "Another organization or project than the key's; for members, no engram user or no "
    "member with that email.",
    409: "A project of that name exists; for members, already a member, or the last owner.",
    413: "The body is larger than ENGRAM_MAX_BODY_BYTES.",
    415: "The body is not JSON (Content-Type).",
    429: "Over the key's request rate (ENGRAM_API_RATE); see Retry-After.",
}


def answers(success: dict[int, Any], *codes: int) -> dict[int, Any]:
    """`success`, 401, 404 and 429 (every request), and the error statuses `codes`."""
    wanted = sorted({401, 404, 429, *codes})
    return success | {code: OpenApiResponse(ErrorSerializer, REASONS[code]) for code in wanted}


BODY = (400, 413, 415)


@extend_schema(
    methods=["GET"],
    parameters=[FIELDS_PARAMETER],
    responses=answers({200: s.ProjectSerializer}, 400),
    summary="Get the project",
)
@extend_schema(
    methods=["PATCH"],
    request=s.ProjectUpdateSerializer,
    responses=answers({200: s.ProjectMessageSerializer}, *BODY, 403, 409),
    summary="Change the project's settings",
)
@extend_schema(
    methods=["DELETE"],
    responses={
        403: OpenApiResponse(ErrorSerializer, "Always: an operator deletes a project."),
        **answers({}),
    },
    summary="Delete the project (refused: an operator does it in the admin)",
)
@api_view(["GET", "PATCH", "DELETE"])
def project_detail(request: Request, org_id: str, project_id: str) -> Response:
    project = key_project(request, org_id, project_id)
    key = request_key(request)
    if request.method == "GET":
        return Response(project_body(project, key, requested_fields(request)))
    if request.method == "DELETE":
        raise PermissionDenied(DELETE_REFUSED)
    serializer = s.ProjectUpdateSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    _check_address(serializer.validated_data, project)
    require_role(key, EDITORS, "change the project's settings")
    try:
        actions.do_update_project_settings(project, serializer.changes())
    except actions.ConflictError as conflict:
        raise Conflict(str(conflict)) from None
    return Response({"message": "Project updated successfully"})


@extend_schema(
    request=s.ProjectCreateSerializer,
    responses=answers({200: s.CreatedProjectSerializer}, *BODY, 403, 409),
    summary="Create a project in the key's organization",
)
@api_view(["POST"])
def create_project(request: Request, org_id: str) -> Response:
    project = key_project(request, org_id)
    serializer = s.ProjectCreateSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    _check_address(serializer.validated_data, project)
    require_role(request_key(request), EDITORS, "create projects")
    data = serializer.validated_data
    try:
        created = actions.do_create_project(
            project.organization, name=data["name"], description=data.get("description", "")
        )
    except actions.ConflictError as conflict:
        raise Conflict(str(conflict)) from None
    return Response({"message": "Project created successfully.", "project_id": str(created.pk)})


MEMBER_NOT_FOUND = "No member of the organization has this email."


@extend_schema(
    methods=["GET"], responses=answers({200: s.MembersSerializer}), summary="List the members"
)
@extend_schema(
    methods=["POST"],
    request=s.MemberSerializer,
    responses=answers({200: s.ProjectMessageSerializer}, *BODY, 403, 409),
    summary="Add a member (an existing engram user, by email)",
)
@extend_schema(
    methods=["PUT"],
    request=s.MemberSerializer,
    responses=answers({200: s.ProjectMessageSerializer}, *BODY, 403, 409),
    summary="Change a member's role",
)
@extend_schema(
    methods=["DELETE"],
    parameters=[
        OpenApiParameter(
            "email", OpenApiTypes.EMAIL, required=True, description="The member's email."
        )
    ],
    responses=answers({200: s.ProjectMessageSerializer}, 400, 403, 409),
    summary="Remove a member",
)
@api_view(["GET", "POST", "PUT", "DELETE"])
def members(request: Request, org_id: str, project_id: str) -> Response:
    project = key_project(request, org_id, project_id)
    if request.method == "GET":
        return Response({"members": member_rows(project)})
    # The clients send DELETE's email in the query string (a DELETE has no documented body).
    serializer = (
        s.MemberEmailSerializer(data=request.query_params)
        if request.method == "DELETE"
        else s.MemberSerializer(data=request.data)
    )
    serializer.is_valid(raise_exception=True)
    require_role(request_key(request), (Membership.Role.OWNER,), "change the members")
    return _change_member(request.method or "", project, serializer.validated_data)


def _change_member(method: str, project: Project, data: dict[str, Any]) -> Response:
    organization = project.organization
    try:
        if method == "POST":
            actions.do_add_member(organization, email=data["email"], role=data["role"])
            return Response({"message": "User added to the project successfully."})
        if method == "PUT":
            actions.do_update_member(organization, email=data["email"], role=data["role"])
            return Response({"message": "User role updated successfully."})
        actions.do_remove_member(organization, email=data["email"])
    except actions.MemberNotFoundError:
        raise NotFound(MEMBER_NOT_FOUND) from None
    except actions.UnknownUserError as unknown:
        raise NotFound(str(unknown)) from None
    except actions.ConflictError as conflict:
        raise Conflict(str(conflict)) from None
    return Response({"message": "Member removed from the project."}, status=status.HTTP_200_OK)


ORGS = "api/v1/orgs/organizations/<str:org_id>/projects/"

urlpatterns = [
    path(ORGS, create_project, name="org-projects"),
    path(f"{ORGS}<str:project_id>/", project_detail, name="org-project"),
    path(f"{ORGS}<str:project_id>/members/", members, name="org-project-members"),
]
