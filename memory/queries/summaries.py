"""The scopes' running summaries (ScopeSummary: what extraction keeps as context), for
POST /v1/summary/.

May import memory.models and Django; no other module of this package.
"""

from __future__ import annotations

import uuid

from django.db.models import Q

from memory.models import ScopeSummary


def scope_summaries(project_id: uuid.UUID, where: Q, *, limit: int) -> list[ScopeSummary]:
    """The project's written summaries whose scope matches `where` (a filter compiled by
    memory.retrieval.filters on the scope ids and updated_at), the most recent first."""
    found = ScopeSummary.objects.filter(project_id=project_id).filter(where).exclude(text="")
    return list(found.order_by("-updated_at", "id")[:limit])
