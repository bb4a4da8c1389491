"""The only writers of memory state.

Every create, in-place update, supersede, delete and restore of a memory goes through a `do_*`
function here, whoever asks: the API, the extraction pipeline, the dashboards, the admin, a
management command. Each one:

- runs in one transaction inside the memory's tenant context (tenants.db.project_context; it
  nests as a savepoint when the caller already opened one, e.g. the pipeline applying several
  decisions at once);
- writes its history rows in that transaction, naming the Actor;
- enforces the rules once: an immutable memory is never changed, and is deleted only on a
  person's or an API key's explicit request, never by the model's decision.

Text is embedded before any transaction opens: callers pass the vectors they computed, or let
the action embed (then call it outside a transaction: a hosted embedder is an HTTP call). Hard
erasure (GDPR) is `do_erase_user`, which calls the one database-side erasure path. Work for the
worker (extraction, entity linking, summaries, erasures) is sent by name through memory.jobs,
once the transaction has committed.

This module is the package's interface: callers write `from memory import actions` and call
`actions.do_…(…)`. The modules, by aggregate:

- common: the Actor, the refusals, the immutability rule, the user and scope locks, embedding;
- _shared: private helpers (history rows, actor parsing, on-commit entity linking);
- adds: the add use case (queued, or messages stored verbatim with their conversation);
- memories: create, supersede, update, delete, restore, batch update and delete;
- events: add requests queued for extraction, what extraction records in the graph, summaries;
- feedback, exports, idempotency: their records;
- rerank_usage: what reranked searches used, per project and day;
- erasure: a user's erasure, direct or requested through the API;
- redaction: a memory's redaction, retention purges of memories and of add requests' payloads;
- reverts: undoing everything one processed add request did.

May import memory.models, memory.graph, memory.text, memory.jobs, audit.models, tenants and
config; never memory.queries, memory.api, memory.web, memory.mcp or memory.extraction.
"""

from __future__ import annotations

from memory.actions._shared import schedule_entity_linking
from memory.actions.adds import (
    AddInput,
    AddOutcome,
    Message,
    do_add,
    do_add_messages,
    embed_messages,
    prepare_add,
)
from memory.actions.common import (
    UNSET,
    Actor,
    ImmutableMemoryError,
    NotRestorableError,
    Vector,
    check_mutable,
    embed_texts,
    hold_scope,
    hold_user,
)
from memory.actions.erasure import (
    ERASURE_HASH_LABEL,
    ERASURE_MAX_ATTEMPTS,
    ERASURE_STORES,
    do_erase_user,
    do_hide_and_request_erasure,
    do_request_user_erasure,
    do_run_erasure,
    erasure_subject_hash,
)
from memory.actions.events import (
    GraphAssertion,
    GraphOutcome,
    do_cancel_queued_adds,
    do_queue_add,
    do_record_graph,
    schedule_summary_refresh,
)
from memory.actions.exports import do_create_export
from memory.actions.feedback import do_record_feedback
from memory.actions.idempotency import (
    do_claim_idempotency_key,
    do_prune_idempotency_keys,
    do_record_idempotent_response,
)
from memory.actions.memories import (
    BatchUpdate,
    MemoryEdit,
    NewMemory,
    do_batch_delete,
    do_batch_update,
    do_create_memory,
    do_delete_memories,
    do_delete_memory,
    do_restore_memory,
    do_supersede_memory,
    do_update_memory,
)
from memory.actions.redaction import (
    MEMORY_ERASURE_STORES,
    RETENTION_CHUNK,
    do_purge_event_payloads,
    do_purge_memories,
    do_redact_memory,
)
from memory.actions.rerank_usage import do_count_rerank
from memory.actions.reverts import RevertConflictError, do_revert_event

__all__ = [
    "ERASURE_HASH_LABEL",
    "ERASURE_MAX_ATTEMPTS",
    "ERASURE_STORES",
    "MEMORY_ERASURE_STORES",
    "RETENTION_CHUNK",
    "UNSET",
    "Actor",
    "AddInput",
    "AddOutcome",
    "BatchUpdate",
    "GraphAssertion",
    "GraphOutcome",
    "ImmutableMemoryError",
    "MemoryEdit",
    "Message",
    "NewMemory",
    "NotRestorableError",
    "RevertConflictError",
    "Vector",
    "check_mutable",
    "do_add",
    "do_add_messages",
    "do_batch_delete",
    "do_batch_update",
    "do_cancel_queued_adds",
    "do_claim_idempotency_key",
    "do_count_rerank",
    "do_create_export",
    "do_create_memory",
    "do_delete_memories",
    "do_delete_memory",
    "do_erase_user",
    "do_hide_and_request_erasure",
    "do_prune_idempotency_keys",
    "do_purge_event_payloads",
    "do_purge_memories",
    "do_queue_add",
    "do_record_feedback",
    "do_record_graph",
    "do_record_idempotent_response",
    "do_redact_memory",
    "do_request_user_erasure",
    "do_restore_memory",
    "do_revert_event",
    "do_run_erasure",
    "do_supersede_memory",
    "do_update_memory",
    "embed_messages",
    "embed_texts",
    "erasure_subject_hash",
    "hold_scope",
    "hold_user",
    "prepare_add",
    "schedule_entity_linking",
    "schedule_summary_refresh",
]
