"""Erasure of a user (GDPR right to erasure): the database-side erasure, the erasure asked
through the API (recorded, queued, run by the worker) and the salted hash of an erased id.

May import memory.actions.common, memory.actions._shared and memory.actions.memories,
audit.models, memory.jobs, memory.models, tenants and Django.
"""

from __future__ import annotations

import json
import uuid

from django.db import connection, transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac

from audit.models import ErasureRequest
from memory import jobs
from memory.actions._shared import _as_actor
from memory.actions.common import Actor, hold_user
from memory.actions.memories import do_delete_memories
from memory.models import SCOPE_MAX_LENGTH, Memory
from tenants.db import project_context
from tenants.models import Project
from webhooks.outbox import erasure_complete

# The label of the key that hashes erased ids: HMAC-SHA256 keyed by a key derived from
# SECRET_KEY and this label (django.utils.crypto.salted_hmac). Rotating SECRET_KEY changes
# every future hash, so earlier purge records no longer match the same id.
ERASURE_HASH_LABEL = "engram.erasure.subject.v1"
# The stores engram_erase_user reports on, in the order they are listed.
ERASURE_STORES = (
    "memories",
    "feedback",
    "entity_links",
    "graph_entities",
    "graph_relations",
    "history",
    "summaries",
    "events",
    "queue_messages",
    "exports",
    "idempotency",
    "profiles",
    "profile_jobs",
    "access_log",
)


def erasure_subject_hash(project_id: uuid.UUID, kind: str, subject_id: str) -> str:
    """The salted hash an erased id is replaced by (64 hex digits), per project and kind."""
    value = f"{project_id}:{kind}:{subject_id}"
    return salted_hmac(ERASURE_HASH_LABEL, value, algorithm="sha256").hexdigest()


def do_erase_user(
    project: Project | uuid.UUID, user_id: str, *, actor: Actor | str, dry_run: bool = False
) -> dict[str, int]:
    """Erase one user of one project from every store, for good (GDPR right to erasure).

    One call of the database function `engram_erase_user` (audit migrations 0008, 0010, 0013), in
    one transaction in the project's tenant context: it deletes the user's memories, their
    feedback, entity links and history, the user's vertices in the project's AGE graph
    (graph_entities: every vertex whose user_id is the user) with their edges and any edge of
    the user (graph_relations), scope summaries, add requests and their queue messages, the
    exports that hold any of it and the answers kept for Idempotency-Key replays that name its
    memories (idempotency); replaces the id by its salted hash in the access log; and
    writes a purge record with the counts. Returns the rows per store; `dry_run` counts only
    and writes nothing. A second run erases nothing and records that.
    """
    if not user_id or len(user_id) > SCOPE_MAX_LENGTH:
        raise ValueError(f"user_id must have 1 to {SCOPE_MAX_LENGTH} characters.")
    project_id = project.pk if isinstance(project, Project) else project
    subject = erasure_subject_hash(project_id, "user", user_id)
    with project_context(project_id), connection.cursor() as cursor:
        hold_user(project_id, user_id, exclusive=True)  # writes in progress finish first
        cursor.execute(
            "SELECT engram_erase_user(%s, %s, %s, %s, %s)",
            [project_id, user_id, subject, str(_as_actor(actor)), dry_run],
        )
        row = cursor.fetchone()
        counts = row[0] if row else {}
        if isinstance(counts, str):  # Django leaves jsonb undecoded outside a JSONField
            counts = json.loads(counts)
        ordered = sorted(
            counts, key=lambda s: ERASURE_STORES.index(s) if s in ERASURE_STORES else 99
        )
        result = {store: int(counts[store]) for store in ordered}
        if not dry_run:
            # Erasures of this user asked through the API and not yet run are done by this one:
            # their clear-text id goes with everything else.
            ErasureRequest.objects.filter(
                project_id=project_id, subject_hash=subject, status=ErasureRequest.Status.PENDING
            ).update(
                status=ErasureRequest.Status.SUCCEEDED,
                counts=result,
                subject_id="",
                completed_at=timezone.now(),
            )
            erasure_complete(project_id, subject)  # the webhooks' erasure_complete event
    return result


# Attempts at an API erasure before it is FAILED (the worker job retries in between).
ERASURE_MAX_ATTEMPTS = 4


def do_request_user_erasure(
    project: Project | uuid.UUID, user_id: str, *, actor: Actor | str
) -> ErasureRequest:
    """Record an erasure of `user_id` and queue it for a worker, once this transaction commits
    (the API's entity delete: the caller hides the memories at once in the same transaction)."""
    if not user_id or len(user_id) > SCOPE_MAX_LENGTH:
        raise ValueError(f"user_id must have 1 to {SCOPE_MAX_LENGTH} characters.")
    project_id = project.pk if isinstance(project, Project) else project
    with project_context(project_id):
        request = ErasureRequest.objects.create(
            project_id=project_id,
            subject_hash=erasure_subject_hash(project_id, "user", user_id),
            subject_id=user_id,
            actor=str(_as_actor(actor)),
        )
        args = (str(request.id), str(project_id))
        # A lost send is logged; the request stays PENDING (the user's memories already hidden)
        # until `purge_user` completes it.
        transaction.on_commit(lambda: jobs.ERASE_USER.send(*args), robust=True)
    return request


def do_hide_and_request_erasure(
    project: Project | uuid.UUID, user_id: str, *, actor: Actor | str
) -> tuple[int, ErasureRequest]:
    """The right to erasure as a caller asks it (the API's user delete, the end user's own
    dashboard): in one transaction, queue the erasure (do_request_user_erasure) and hide every
    active memory of the user at once (the soft delete, with history rows). Returns the number
    of memories hidden and the request.

    The request comes first: the webhooks' outbox trigger (webhooks migration 0003) sees it and
    reports each memory hidden by its id alone, never its text or the user's id.
    """
    project_id = project.pk if isinstance(project, Project) else project
    with project_context(project_id):
        request = do_request_user_erasure(project_id, user_id, actor=actor)
        hidden = do_delete_memories(
            Memory.objects.for_project(project_id).filter(user_id=user_id), actor=actor
        )
        return hidden, request


def do_run_erasure(project_id: uuid.UUID, request_id: uuid.UUID) -> bool:
    """Carry out a requested erasure; True when the job is done (or was), False to retry.

    The attempt is counted first, in its own transaction. Then, in one transaction, the user is
    erased (do_erase_user: every store, the purge record) and the request marked SUCCEEDED with
    the counts, its clear-text id cleared. A failure is recorded on the request; after
    ERASURE_MAX_ATTEMPTS it is FAILED for good (the id is kept, so an operator can run
    purge_user). Safe to run again: a finished request is left alone.
    """
    with project_context(project_id):
        request = ErasureRequest.objects.select_for_update().filter(pk=request_id).first()
        if request is None or request.status != ErasureRequest.Status.PENDING:
            return True
        request.attempts += 1
        request.save(update_fields=["attempts"])
    try:
        with project_context(project_id):
            request = ErasureRequest.objects.select_for_update().get(pk=request_id)
            counts = do_erase_user(project_id, request.subject_id, actor=request.actor)
            request.status, request.counts, request.subject_id = (
                ErasureRequest.Status.SUCCEEDED,
                counts,
                "",
            )
            request.error, request.completed_at = "", timezone.now()
            request.save()
    except Exception as exc:
        final = request.attempts >= ERASURE_MAX_ATTEMPTS
        with project_context(project_id):
            ErasureRequest.objects.filter(pk=request_id).update(
                error=f"attempt {request.attempts}: {type(exc).__name__}",
                status=ErasureRequest.Status.FAILED if final else ErasureRequest.Status.PENDING,
                completed_at=timezone.now() if final else None,
            )
        return final
    return True
