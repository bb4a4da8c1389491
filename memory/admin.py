"""Memory in the Django admin: operators browse a project's memories and correct them.

Every page runs in the chosen project's tenant context (tenants.admin.ProjectScopedAdmin).
Corrections go through the same actions as the API, with the staff member as the actor
("user:<username>" in history): an edited text is re-embedded, a delete is the soft delete,
restoring is an admin action. The other tenant tables are read-only here.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from memory import actions
from memory.models import (
    Feedback,
    IdempotentRequest,
    Memory,
    MemoryEntity,
    MemoryEvent,
    MemoryExport,
    MemoryHistory,
    ScopeSummary,
    metadata_error,
)
from tenants.admin import ProjectScopedAdmin

SCOPE_COLUMNS = ("user_id", "agent_id", "app_id", "run_id")


class MemoryForm(forms.ModelForm[Memory]):
    class Meta:
        model = Memory
        fields = ("text", "metadata", "expiration_date")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.instance.immutable and self.changed_data:
            raise forms.ValidationError("This memory is immutable: it cannot be changed.")
        text = cleaned.get("text")
        if text is not None and not str(text).strip():
            self.add_error("text", "A memory needs some text.")
        metadata = cleaned.get("metadata")
        if metadata is not None and (problem := metadata_error(metadata)) is not None:
            self.add_error("metadata", problem)
        return cleaned


@admin.register(Memory)
class MemoryAdmin(ProjectScopedAdmin[Memory]):
    editable = True
    form = MemoryForm
    list_display = ("short_text", *SCOPE_COLUMNS, "state", "categories", "updated_at")
    list_filter = ("state", "immutable", "role")
    search_fields = ("text", "=user_id", "=agent_id", "=run_id")
    ordering = ("-updated_at",)
    show_full_result_count = False
    actions = ("restore",)
    fields = (
        "text",
        "metadata",
        "expiration_date",
        *SCOPE_COLUMNS,
        "state",
        "replaced_by",
        "categories",
        "immutable",
        "role",
        "actor_id",
        "created_at",
        "updated_at",
        "source_event_id",
        "source_positions",
    )
    readonly_fields = fields[3:]

    @admin.display(description="memory")
    def short_text(self, memory: Memory) -> str:
        return memory.text if len(memory.text) <= 80 else memory.text[:79] + "…"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Memory]:
        return super().get_queryset(request).defer("embedding")

    def save_model(self, request: HttpRequest, obj: Memory, form: Any, change: bool) -> None:
        """The form's changes, applied by the update action to the row as stored."""
        stored = Memory.objects.get(pk=obj.pk)
        changed = set(form.changed_data)
        actions.do_update_memory(
            stored,
            actor=actions.Actor.staff(request.user),  # type: ignore[arg-type]
            text=obj.text if "text" in changed else None,
            metadata=obj.metadata if "metadata" in changed else None,
            expiration_date=obj.expiration_date if "expiration_date" in changed else actions.UNSET,
        )

    def delete_model(self, request: HttpRequest, obj: Memory) -> None:
        actions.do_delete_memory(obj, actor=actions.Actor.staff(request.user))  # type: ignore[arg-type]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Memory]) -> None:
        actions.do_delete_memories(queryset, actor=actions.Actor.staff(request.user))  # type: ignore[arg-type]

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """A delete here is the soft delete: the memory is hidden, its history kept."""
        rows = list(objs)
        return [str(m) for m in rows], {"memories": len(rows)}, set(), []

    @admin.action(description="Restore the selected deleted memories")
    def restore(self, request: HttpRequest, queryset: QuerySet[Memory]) -> None:
        if not self.has_change_permission(request):
            self.message_user(request, "You may not change this project.", messages.ERROR)
            return
        restored = 0
        for memory in queryset.filter(state=Memory.State.DELETED):
            actions.do_restore_memory(memory, actor=actions.Actor.staff(request.user))  # type: ignore[arg-type]
            restored += 1
        self.message_user(request, f"{restored} memories restored.")


@admin.register(MemoryHistory)
class MemoryHistoryAdmin(ProjectScopedAdmin[MemoryHistory]):
    list_display = ("memory_id", "event", "actor", *SCOPE_COLUMNS, "created_at")
    list_filter = ("event",)
    search_fields = ("=memory_id", "=actor", "=event_id")
    ordering = ("-created_at",)
    show_full_result_count = False


@admin.register(MemoryEvent)
class MemoryEventAdmin(ProjectScopedAdmin[MemoryEvent]):
    list_display = ("id", "status", *SCOPE_COLUMNS, "extractor", "attempts", "created_at")
    list_filter = ("status", "extractor")
    search_fields = ("=id", "=user_id", "=agent_id", "=run_id")
    ordering = ("-created_at",)
    show_full_result_count = False


@admin.register(Feedback)
class FeedbackAdmin(ProjectScopedAdmin[Feedback]):
    list_display = ("memory_id", "feedback", "feedback_reason", "created_at")
    list_filter = ("feedback",)
    ordering = ("-created_at",)


@admin.register(MemoryExport)
class MemoryExportAdmin(ProjectScopedAdmin[MemoryExport]):
    list_display = ("id", "created_at")
    ordering = ("-created_at",)


@admin.register(ScopeSummary)
class ScopeSummaryAdmin(ProjectScopedAdmin[ScopeSummary]):
    list_display = (*SCOPE_COLUMNS, "updated_at")
    search_fields = ("=user_id", "=agent_id", "=run_id")


@admin.register(MemoryEntity)
class MemoryEntityAdmin(ProjectScopedAdmin[MemoryEntity]):
    list_display = ("entity_name", "memory_id", *SCOPE_COLUMNS, "created_at")
    search_fields = ("=entity_name", "=memory_id", "=user_id")
    ordering = ("-created_at",)
    show_full_result_count = False


@admin.register(IdempotentRequest)
class IdempotentRequestAdmin(ProjectScopedAdmin[IdempotentRequest]):
    list_display = ("key", "status", "created_at")
    search_fields = ("=key",)
    ordering = ("-created_at",)
