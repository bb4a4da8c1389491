"""Dramatiq actors: thin, take ids, safe to run twice. The work is in memory.pipeline."""

from __future__ import annotations

import logging
import uuid

import dramatiq
from django.conf import settings

from memory import pipeline
from memory.llm import get_extractor

logger = logging.getLogger(__name__)


@dramatiq.actor(queue_name="events", max_retries=0, time_limit=15 * 60 * 1000)
def process_event(event_id: str, project_id: str) -> None:
    """Run one add request's extraction. Failures are retried through the event row.

    A transient failure (rate limit, server error, timeout) puts the event back to PENDING
    and re-sends it with backoff; after ENGRAM_EVENT_MAX_ATTEMPTS the event is FAILED with the
    error recorded. Nothing is applied unless the whole event succeeds (pipeline.apply).
    """
    event, project = uuid.UUID(event_id), uuid.UUID(project_id)
    try:
        pipeline.process_event(event, project, get_extractor())
    except Exception as exc:
        attempts = pipeline.release(event, project, repr(exc), settings.ENGRAM_EVENT_MAX_ATTEMPTS)
        if attempts < settings.ENGRAM_EVENT_MAX_ATTEMPTS:
            delay = min(60_000, 1000 * 2**attempts)
            logger.warning("event %s failed (attempt %s), retrying", event_id, attempts)
            process_event.send_with_options(args=(event_id, project_id), delay=delay)
        else:
            logger.exception("event %s failed for good after %s attempts", event_id, attempts)


@dramatiq.actor(queue_name="summaries", max_retries=3, time_limit=5 * 60 * 1000)
def refresh_summary(event_id: str, project_id: str) -> None:
    """Keep the scope's running summary current (context for its next extraction)."""
    pipeline.refresh_summary(uuid.UUID(event_id), uuid.UUID(project_id), get_extractor())
