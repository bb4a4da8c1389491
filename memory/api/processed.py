"""Synchronous adds: an `infer=true` add that answers with what extraction did, as Mem0 did
before its adds became asynchronous.

A request is synchronous when it says `async_mode: false`, or when it comes to the legacy
`POST /v1/memories/` without `async_mode` at all: mem0ai 0.1.x sends it so and reads the
processed results (1.x sends `async_mode: true` unless told otherwise; the v3 path is
asynchronous unless told otherwise). Extraction still runs in the worker: the request is queued
and committed as any other, then the web process waits for the worker to finish the event,
polling its status in short transactions, for ENGRAM_SYNC_ADD_WAIT_MS at most (and within the
request's statement budget). So the wait is bounded, and a key whose synchronous adds pile up is
held by the slow-request limit like any slow request.

The answers, by path and output_format:
- done (SUCCEEDED), 200: v3 and v1 with "v1.1", an object {message, status, event_id, results,
  warning}; v1 otherwise, the bare list of results (mem0ai 0.1.29 read a list). No
  `relations`: Mem0 answered them only with graph memory, and strands-agents-tools reads an
  add's `relations` as an object (an empty list there broke it);
- not done in time, 202: the same object with status PENDING or RUNNING and no results, or on
  the bare-list form the queued list (one item with the event id);
- FAILED, 502, with `detail`: the request was kept (its event says why it failed);
- erased meanwhile (the user was erased while it waited), 410.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from memory import queries
from memory.api.common import project_id
from memory.models import MemoryEvent
from tenants.db import project_context

# The first pause between two polls, and the longest: a fast worker is seen within tens of
# milliseconds, a slow one costs a poll every half second.
FIRST_PAUSE = 0.05
LONGEST_PAUSE = 0.5

FINISHED = (MemoryEvent.Status.SUCCEEDED, MemoryEvent.Status.FAILED)


def synchronous(request: Request, data: dict[str, Any]) -> bool:
    """Whether the add answers with what extraction did (the module's docstring)."""
    if not data["infer"]:
        return False  # stored at once anyway
    mode = data.get("async_mode")
    if mode is None:
        return request.path.startswith("/v1/")
    return not mode


def wait_seconds() -> float:
    """How long a synchronous add may wait: ENGRAM_SYNC_ADD_WAIT_MS, within the request's
    statement budget less a second (the polls are statements; the budget would cancel one)."""
    wait = settings.ENGRAM_SYNC_ADD_WAIT_MS
    budget = settings.ENGRAM_API_REQUEST_BUDGET_MS
    if budget:
        wait = min(wait, budget - 1000)
    return max(0, wait) / 1000


def finished_event(project: uuid.UUID, event_id: uuid.UUID, seconds: float) -> MemoryEvent | None:
    """The event once a worker has finished it, or as it stands when `seconds` have passed;
    None if it is gone (erased). Each poll is one indexed read in its own transaction, so the
    wait holds no transaction and no lock."""
    deadline = time.monotonic() + seconds
    pause = FIRST_PAUSE
    while True:
        with project_context(project):
            event = queries.event(project, event_id)
        if event is None or event.status in FINISHED or time.monotonic() + pause > deadline:
            return event
        time.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE)


def queued_event_id(body: Any) -> uuid.UUID | None:
    """The event id in a queued add's answer (an object, or v1's list or v1.1 object of one
    queued item): also in a replayed answer (Idempotency-Key)."""
    item = body
    if isinstance(body, dict) and isinstance(body.get("results"), list):
        item = body["results"][0] if body["results"] else None
    elif isinstance(body, list):
        item = body[0] if body else None
    if not isinstance(item, dict) or item.get("status") != MemoryEvent.Status.PENDING:
        return None
    try:
        return uuid.UUID(str(item.get("event_id")))
    except ValueError:
        return None


def answer(request: Request, event_id: uuid.UUID, data: dict[str, Any]) -> Response:
    """Wait for the queued add's event and answer with what its extraction did."""
    event = finished_event(project_id(request), event_id, wait_seconds())
    if event is None:
        return Response(
            {"detail": "The add's request was erased before it was processed (the user was "
             "erased meanwhile).", "event_id": str(event_id)},
            status=status.HTTP_410_GONE,
        )  # fmt: skip
    if event.status == MemoryEvent.Status.FAILED:
        return Response(
            {
                "detail": f"The add was kept as request {event.id}, but its extraction failed: "
                f"{event.error or 'no reason recorded'}",
                "event_id": str(event.id),
                "status": event.status,
            },
            status=status.HTTP_502_BAD_GATEWAY,
        )
    done = event.status == MemoryEvent.Status.SUCCEEDED
    results = (
        [{**item, "data": {"memory": item["memory"]}} for item in event.results] if done else []
    )
    code = status.HTTP_200_OK if done else status.HTTP_202_ACCEPTED
    bare = request.path.startswith("/v1/") and data.get("output_format") != "v1.1"
    if bare:
        if done:
            return Response(results, status=code)
        still = {"message": still_processing(event), "status": event.status,
                 "event_id": str(event.id)}  # fmt: skip
        return Response([still], status=code)
    return Response(
        {
            "message": "Memories processed" if done else still_processing(event),
            "status": event.status,
            "event_id": str(event.id),
            "results": results,
            "warning": event.warning or None,
        },
        status=code,
    )


def still_processing(event: MemoryEvent) -> str:
    return (
        f"Not processed within {wait_seconds():g} s: poll GET /v1/event/{event.id}/ for the results"
    )
