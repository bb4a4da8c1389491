"""The project's settings page: what extraction reads (custom instructions and categories),
retention, the name, and the organization's members.

Written through tenants.actions, the same functions as the API's PATCH of the project and its
member endpoints (tenants.projects_api). Owners and admins change settings; owners change
members (as with an API key); readers see everything read-only and get 403 on any POST
(operator_page). Each POST redirects back (post/redirect/get) with a message.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings as django_settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.utils.html import format_html
from django.views.decorators.http import require_POST
from rest_framework import serializers

from memory.web.common import Dashboard, operator_page
from tenants import actions
from tenants.models import Membership
from tenants.project_serializers import (
    MAX_RETENTION_DAYS,
    ROLE_WORDS,
    fixed_settings,
    validate_categories,
)

ROLE_CHOICES = [(role, ROLE_WORDS[role].capitalize()) for role in Membership.Role.values]


def categories_text(categories: Any) -> str:
    """The stored categories as the form shows them: one a line, "name: description"."""
    lines = []
    for item in categories if isinstance(categories, list) else []:
        if isinstance(item, dict):
            lines += [f"{name}: {text}" if text else str(name) for name, text in item.items()]
        else:
            lines.append(str(item))
    return "\n".join(lines)


def parse_categories(text: str) -> list[Any]:
    """One category a line: "name" or "name: description" (kept as {"name": "description"},
    Mem0's form)."""
    result: list[Any] = []
    for line in text.splitlines():
        name, _, description = line.partition(":")
        if not name.strip():
            continue
        result.append({name.strip(): description.strip()} if description.strip() else name.strip())
    return result


class SettingsForm(forms.Form):
    name = forms.CharField(max_length=200)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    custom_instructions = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 6}),
        help_text="What extraction should remember or leave out, in your words; an add "
        "request's own custom_instructions replace them for that request.",
    )
    includes = forms.CharField(
        required=False,
        strip=False,
        label="Only remember",
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Mem0's includes: what extraction only remembers (an add request's own "
        "includes replace it).",
    )
    excludes = forms.CharField(
        required=False,
        strip=False,
        label="Never remember",
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Mem0's excludes: what extraction never remembers (an add request's own "
        "excludes replace it).",
    )
    custom_categories = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6}),
        help_text='One a line: "name" or "name: description". Empty: engram\'s default categories.',
    )
    deleted_retention_days = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_RETENTION_DAYS,
        label="Keep deleted memories (days)",
        help_text="Empty: the server's default; 0: for ever.",
    )
    event_retention_days = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_RETENTION_DAYS,
        label="Keep add requests' messages (days)",
        help_text="Empty: the server's default; 0: for ever.",
    )

    def _bounded(self, name: str) -> str:
        value: str = self.cleaned_data[name]
        limit = django_settings.ENGRAM_MAX_TEXT_CHARS
        if len(value) > limit:
            raise forms.ValidationError(f"{len(value)} characters; the limit is {limit}.")
        return value

    def clean_custom_instructions(self) -> str:
        return self._bounded("custom_instructions")

    def clean_includes(self) -> str:
        return self._bounded("includes")

    def clean_excludes(self) -> str:
        return self._bounded("excludes")

    def clean_custom_categories(self) -> list[Any]:
        try:
            return validate_categories(parse_categories(self.cleaned_data["custom_categories"]))
        except serializers.ValidationError as exc:
            raise forms.ValidationError(" ".join(str(m) for m in exc.detail)) from None


class MemberForm(forms.Form):
    email = forms.EmailField(max_length=254)
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial=Membership.Role.READER)


def initial_settings(dash: Dashboard) -> dict[str, Any]:
    project = dash.project
    return {
        "name": project.name,
        "description": project.description,
        "custom_instructions": project.custom_instructions,
        "includes": project.includes,
        "excludes": project.excludes,
        "custom_categories": categories_text(project.custom_categories),
        "deleted_retention_days": project.deleted_retention_days,
        "event_retention_days": project.event_retention_days,
    }


def _page(
    request: HttpRequest,
    dash: Dashboard,
    form: SettingsForm | None = None,
    member_form: MemberForm | None = None,
    status: int = 200,
) -> HttpResponse:
    members = Membership.objects.filter(organization_id=dash.project.organization_id)
    context = {
        "section": "settings",
        "form": form or SettingsForm(initial=initial_settings(dash)),
        "member_form": member_form or MemberForm(),
        "members": members.select_related("user").order_by("user__username"),
        "role_choices": ROLE_CHOICES,
        "can_manage_members": dash.role == Membership.Role.OWNER,
        "fixed": fixed_settings(),
    }
    return render(request, "web/operator/settings.html", context, status=status)


@operator_page()
def settings(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    """GET: the settings (a form for owners and admins); POST: save them."""
    if request.method != "POST":
        return _page(request, dash)
    form = SettingsForm(request.POST)
    if not form.is_valid():
        return _page(request, dash, form=form, status=400)
    try:
        actions.do_update_project_settings(dash.project, form.cleaned_data)
    except actions.NameTakenError as taken:
        form.add_error("name", str(taken).removeprefix("name: "))
        return _page(request, dash, form=form, status=400)
    messages.success(request, "Settings saved: the next add requests use them.")
    return redirect("web:settings", project_id=dash.project.pk)


def _owner_only(dash: Dashboard) -> None:
    if dash.role != Membership.Role.OWNER:
        raise PermissionDenied("Only owners change the organization's members.")


@operator_page(write=True)
@require_POST
def member_add(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    _owner_only(dash)
    form = MemberForm(request.POST)
    if not form.is_valid():
        return _page(request, dash, member_form=form, status=400)
    data = form.cleaned_data
    try:
        actions.do_add_member(dash.project.organization, email=data["email"], role=data["role"])
    except (actions.UnknownUserError, actions.ConflictError) as refused:
        form.add_error("email", str(refused).removeprefix("email: "))
        return _page(request, dash, member_form=form, status=400)
    messages.success(request, format_html("<bdi>{}</bdi> is now a member.", data["email"]))
    return redirect("web:settings", project_id=dash.project.pk)


@operator_page(write=True)
@require_POST
def member_change(request: HttpRequest, dash: Dashboard) -> HttpResponse:
    """Change a member's role (`role` given) or remove the member (`remove`: the confirmation
    page's form, member_remove, is the dashboard's way)."""
    _owner_only(dash)
    form = MemberForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a member and a role.")
        return redirect("web:settings", project_id=dash.project.pk)
    email, organization = form.cleaned_data["email"], dash.project.organization
    try:
        if "remove" in request.POST:
            actions.do_remove_member(organization, email=email)
            done = "<bdi>{}</bdi> is no longer a member."
        else:
            actions.do_update_member(organization, email=email, role=form.cleaned_data["role"])
            done = "<bdi>{}</bdi>'s role is changed."
    except actions.MemberNotFoundError:
        messages.error(request, format_html("<bdi>{}</bdi> is not a member.", email))
    except actions.ConflictError as refused:
        messages.error(request, str(refused).removeprefix("email: "))
    else:
        messages.success(request, format_html(done, email))
    return redirect("web:settings", project_id=dash.project.pk)


@operator_page(write=True)
def member_remove(request: HttpRequest, dash: Dashboard, membership_id: int) -> HttpResponse:
    """GET: a confirmation; POST: the member loses every project of the organization."""
    _owner_only(dash)
    member = (
        Membership.objects.filter(organization_id=dash.project.organization_id, pk=membership_id)
        .select_related("user")
        .first()
    )
    if member is None or not member.user.email:
        raise Http404("No such member.")
    if request.method != "POST":
        context = {"section": "settings", "member": member}
        return render(request, "web/operator/member_remove.html", context)
    email = member.user.email
    try:
        actions.do_remove_member(dash.project.organization, email=email)
    except actions.MemberNotFoundError:
        messages.error(request, format_html("<bdi>{}</bdi> is not a member.", email))
    except actions.ConflictError as refused:
        messages.error(request, str(refused).removeprefix("email: "))
    else:
        messages.success(request, format_html("<bdi>{}</bdi> is no longer a member.", email))
    return redirect("web:settings", project_id=dash.project.pk)


urlpatterns = [
    path("settings/", settings, name="settings"),
    path("settings/members/<int:membership_id>/remove/", member_remove, name="member_remove"),
    path("settings/members/add/", member_add, name="member_add"),
    path("settings/members/change/", member_change, name="member_change"),
]
