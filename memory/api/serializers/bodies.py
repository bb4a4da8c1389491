"""memory_data: a memory's body, as every answer that carries a memory shows it (the REST
API and the MCP tools alike).

May import memory.models; no other module of this package.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from memory.models import Memory


def memory_data(memory: Memory, linked: Sequence[uuid.UUID] | None = None) -> dict[str, Any]:
    """A memory's body; `linked` (queries.linked_memory_ids) adds `linked_memory_ids`."""
    data = {
        "id": str(memory.id),
        "memory": memory.text,
        "user_id": memory.user_id,
        "agent_id": memory.agent_id,
        "app_id": memory.app_id,
        "run_id": memory.run_id,
        "session_id": memory.run_id,
        "actor_id": memory.actor_id or None,
        "role": memory.role or None,
        "hash": memory.hash,
        "metadata": memory.metadata,
        # Null, not [], when there are none: Mem0 answers so, and integrations test for None
        # (LlamaIndex's Mem0Memory writes "[] : <memory>" into the prompt otherwise).
        "categories": list(memory.categories) or None,
        "immutable": memory.immutable,
        "expiration_date": memory.expiration_date.isoformat() if memory.expiration_date else None,
        "created_at": memory.created_at.isoformat(),
        "updated_at": memory.updated_at.isoformat(),
        "structured_attributes": memory.structured_attributes,
        "replaced_by": str(memory.replaced_by_id) if memory.replaced_by_id else None,
        "synthesized": False,
        "lifecycle_state": memory.state,
        "event_id": str(memory.source_event_id) if memory.source_event_id else None,
    }
    if linked is not None:
        data["linked_memory_ids"] = [str(i) for i in linked]
    return data
