"""Feedback on a memory (one row).

May import memory.models and tenants.
"""

from __future__ import annotations

from memory.models import Feedback, Memory
from tenants.db import project_context


def do_record_feedback(memory: Memory, *, feedback: str | None, reason: str) -> Feedback:
    with project_context(memory.project_id):
        return Feedback.objects.create(
            project_id=memory.project_id, memory=memory, feedback=feedback, feedback_reason=reason
        )
