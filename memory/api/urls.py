from __future__ import annotations

from django.urls import path, register_converter

from memory.api import (
    batch,
    context,
    enduser,
    entities,
    events,
    exports,
    feedback,
    graph,
    memories,
    profiles,
    redact,
    search,
    summary,
)
from memory.api.converters import ScopeIdConverter

# <scope:…> matches any id the API stores, "/" included (memory/api/converters.py).
register_converter(ScopeIdConverter, "scope")

urlpatterns = [
    path("v3/memories/add/", memories.add_memories, name="add"),
    path("v3/memories/search/", search.search_v3, name="search"),
    path("v3/memories/", memories.list_v3, name="list"),
    path("v2/memories/search/", search.search_legacy, name="search-v2"),
    path("v2/memories/", memories.list_v2, name="list-v2"),
    path("v1/memories/search/", search.search_legacy, name="search-v1"),
    path("v1/memories/", memories.memories_v1, name="memories-v1"),
    path("v1/memories/<uuid:memory_id>/", memories.memory_detail, name="memory"),
    path("v1/memories/<uuid:memory_id>/history/", memories.memory_history, name="history"),
    path("v1/memories/<uuid:memory_id>/redact/", redact.redact_memory, name="redact"),
    path("v1/batch/", batch.batch, name="batch"),
    path("v1/entities/", entities.entities, name="entities"),
    # Before the entity routes: their <scope:name> would also match "alice/profile".
    path(
        "v2/entities/<str:entity_type>/<scope:name>/profile/",
        profiles.user_profile,
        name="user-profile",
    ),
    path("v2/entities/<str:entity_type>/<scope:name>/", entities.delete_entity, name="entity"),
    path("v1/entities/<str:entity_type>/<scope:name>/", entities.delete_entity, name="entity-v1"),
    path("v1/feedback/", feedback.feedback, name="feedback"),
    path("v1/summary/", summary.summary, name="summary"),
    path("v1/context/", context.context_block, name="context"),
    path("v1/event/<uuid:event_id>/", events.event_detail, name="event"),
    path("v1/event/<uuid:event_id>/revert/", events.revert_event, name="event-revert"),
    path("v1/erasures/<uuid:erasure_id>/", entities.erasure_detail, name="erasure"),
    path("v1/events/", events.event_list, name="events"),
    path("v1/exports/", exports.create_export, name="export"),
    path("v1/exports/get/", exports.get_export, name="export-get"),
    path("v2/profiles/jobs/", profiles.create_job, name="profile-jobs"),
    path("v2/profiles/jobs/<uuid:job_id>/", profiles.job_detail, name="profile-job"),
    path("v2/profiles/settings/", profiles.profile_settings, name="profile-settings"),
    path("v1/graph/", graph.relations, name="graph"),
    path("v1/graph/traverse/", graph.traverse, name="graph-traverse"),
    path("v1/users/<scope:user_id>/dashboard-link/", enduser.dashboard_link, name="dashboard-link"),
]
