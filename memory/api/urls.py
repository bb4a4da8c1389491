from __future__ import annotations

from django.urls import path

from memory.api import views

urlpatterns = [
    path("v3/memories/add/", views.add_memories, name="add"),
    path("v3/memories/search/", views.search_v3, name="search"),
    path("v3/memories/", views.list_v3, name="list"),
    path("v2/memories/search/", views.search_legacy, name="search-v2"),
    path("v2/memories/", views.list_v2, name="list-v2"),
    path("v1/memories/search/", views.search_legacy, name="search-v1"),
    path("v1/memories/", views.memories_v1, name="memories-v1"),
    path("v1/memories/<uuid:memory_id>/", views.memory_detail, name="memory"),
    path("v1/memories/<uuid:memory_id>/history/", views.memory_history, name="history"),
    path("v1/batch/", views.batch, name="batch"),
    path("v1/entities/", views.entities, name="entities"),
    path("v2/entities/<str:entity_type>/<str:name>/", views.delete_entity, name="entity"),
    path("v1/entities/<str:entity_type>/<str:name>/", views.delete_entity, name="entity-v1"),
    path("v1/feedback/", views.feedback, name="feedback"),
    path("v1/event/<uuid:event_id>/", views.event_detail, name="event"),
    path("v1/events/", views.event_list, name="events"),
    path("v1/exports/", views.create_export, name="export"),
    path("v1/exports/get/", views.get_export, name="export-get"),
]
