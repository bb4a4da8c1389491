"""Memory exports (one row holding the exported result).

May import memory.models and tenants.
"""

from __future__ import annotations

from typing import Any

from memory.models import MemoryExport
from tenants.db import project_context
from tenants.models import Project


def do_create_export(
    project: Project, *, schema: dict[str, Any], filters: dict[str, Any], result: list[Any]
) -> MemoryExport:
    with project_context(project.pk):
        return MemoryExport.objects.create(
            project=project, schema=schema, filters=filters, result=result
        )
