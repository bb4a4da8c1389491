"""Dramatiq actors: thin, take ids, safe to run twice. The work is in memory.extraction.pipeline.

Each actor is declared under the name and queue of its job in memory.jobs, through which
memory.actions sends it messages; the options here (retries, backoff, time limits) are the
worker's, applied when it runs them.
"""

from __future__ import annotations

import uuid

import dramatiq

from memory import actions, graph, jobs
from memory.extraction import pipeline
from memory.extraction.llm.provider import get_extractor

# Retries of an erasure job: one fewer than the request's attempts, so the last attempt ends it.
ERASURE_RETRIES = 3


def _retry_when(retries: int, exception: BaseException) -> bool:
    """Re-queue a message only when the actor asked for it (the event row counts attempts)."""
    return isinstance(exception, dramatiq.Retry)


@dramatiq.actor(
    actor_name=jobs.PROCESS_EVENT.actor_name,
    queue_name=jobs.PROCESS_EVENT.queue_name,
    retry_when=_retry_when,
    time_limit=15 * 60 * 1000,
)
def process_event(event_id: str, project_id: str) -> None:
    """Run one attempt at an add request's extraction (memory.extraction.pipeline.attempt).

    A failed attempt that may succeed later leaves the event PENDING and raises Retry: dramatiq's
    Retries middleware puts this same message back on the queue with the backoff as its delay
    (dramatiq-postgres upserts it under its own message id), so an event never has more than
    one message. When the event is finished, FAILED, or no longer this worker's to run, the
    message is simply done: the chain of retries cannot outlive the event's attempts.

    Anything that escapes (the database unreachable while claiming or recording) fails the
    message; the sweeper re-sends the event once no message is left for it.
    """
    delay = pipeline.attempt(uuid.UUID(event_id), uuid.UUID(project_id), get_extractor())
    if delay is not None:
        raise dramatiq.Retry(f"event {event_id}: next attempt", delay=delay)


@dramatiq.actor(
    actor_name=jobs.REFRESH_SUMMARY.actor_name,
    queue_name=jobs.REFRESH_SUMMARY.queue_name,
    max_retries=3,
    time_limit=5 * 60 * 1000,
)
def refresh_summary(event_id: str, project_id: str) -> None:
    """Keep the scope's running summary current (context for its next extraction)."""
    pipeline.refresh_summary(uuid.UUID(event_id), uuid.UUID(project_id), get_extractor())


@dramatiq.actor(
    actor_name=jobs.LINK_ENTITIES.actor_name,
    queue_name=jobs.LINK_ENTITIES.queue_name,
    max_retries=2,
    min_backoff=5_000,
    time_limit=5 * 60 * 1000,
)
def link_entities(project_id: str, memory_ids: list[str]) -> None:
    """Link stored memories to the entities the local recogniser finds in them
    (memory.graph.link_mentions): every memory, raw ones included, so search's entity signal
    works without a model. Safe to run again (links are made once). A message that cannot
    work (ids that are not UUIDs) ends at once; any other failure is retried twice, with
    backoff, then the message is dead: it never loops.
    """
    try:
        project = uuid.UUID(project_id)
        ids = [uuid.UUID(str(m)) for m in memory_ids]
    except (TypeError, ValueError, AttributeError):
        return
    graph.link_mentions(project, ids)


@dramatiq.actor(
    actor_name=jobs.ERASE_USER.actor_name,
    queue_name=jobs.ERASE_USER.queue_name,
    max_retries=ERASURE_RETRIES,
    min_backoff=10_000,
    time_limit=30 * 60 * 1000,
)
def erase_user(request_id: str, project_id: str) -> None:
    """Carry out an erasure asked through the API (memory.actions.do_run_erasure). A failed
    attempt is recorded on the request and retried with backoff; after the last one the
    request is FAILED and the message ends: it never loops."""
    try:
        request, project = uuid.UUID(request_id), uuid.UUID(project_id)
    except (TypeError, ValueError, AttributeError):
        return
    if not actions.do_run_erasure(project, request):
        raise RuntimeError(f"erasure {request_id}: attempt failed, retrying")
