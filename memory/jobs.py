"""The worker's jobs, by name: what a writer sends for work to be done off its path.

Each Job names one Dramatiq actor: its actor name and its queue. memory.extraction.tasks
declares the actors under exactly these names and queues (it reads them from here), with the
options the worker applies when it runs them (retries, backoff, time limits). A send builds the
message the actor's own `send` builds (dramatiq's Message: the queue, the actor name, the
positional arguments, no keyword arguments; as options only the sender's trace context, when
tracing is on: config.tracing) and enqueues it on the configured
broker, memory.extraction.broker.Broker, whose sends give up after SEND_BUDGET_SECONDS. So a
writer (memory.actions, which sends on commit) needs neither the actors nor the code they run.

Imports dramatiq (and config.tracing) only: it sits below memory.actions and memory.extraction
alike.
"""

from __future__ import annotations

from typing import Any

import dramatiq

from config import tracing


class Job:
    """One actor of the worker, by name; `send` enqueues a message for it, at once.

    `project_arg` is the position of the project id among its arguments: the worker claims
    each queue's messages fairly between projects by it (memory.extraction.broker).
    """

    def __init__(self, actor_name: str, queue_name: str, project_arg: int = 1) -> None:
        self.actor_name = actor_name
        self.queue_name = queue_name
        self.project_arg = project_arg

    def __repr__(self) -> str:
        return f"Job({self.actor_name!r}, {self.queue_name!r})"

    def message(self, *args: Any) -> dramatiq.Message[Any]:
        """The message dramatiq's Actor.send would build for these arguments."""
        return dramatiq.Message(
            queue_name=self.queue_name,
            actor_name=self.actor_name,
            args=args,
            kwargs={},
            # The sender's trace context, when tracing is on: the worker's span is its child.
            options=tracing.carrier(),
        )

    def send(self, *args: Any) -> dramatiq.Message[Any]:
        """Enqueue a message for this job on the current broker (the one broker.configure
        made current at start-up), as Actor.send does."""
        return dramatiq.get_broker().enqueue(self.message(*args))


# An add request's extraction (event id, project id): one attempt; it retries itself.
PROCESS_EVENT = Job("process_event", "events")
# The scope's running summary folds in an event's messages (event id, project id).
REFRESH_SUMMARY = Job("refresh_summary", "summaries")
# Stored memories are linked to the entities they mention (project id, [memory id, ...]).
LINK_ENTITIES = Job("link_entities", "entities", project_arg=0)
# An erasure asked through the API (erasure request id, project id).
ERASE_USER = Job("erase_user", "erasures")
# One attempt at a webhook delivery (delivery id, project id); webhooks.tasks, retried by itself.
DELIVER_WEBHOOK = Job("deliver_webhook", "webhooks")
# A user's profile is (re)built from their memories: a job asked through the API (job id,
# project id), or a refresh after their memories changed (profile row id, project id).
RUN_PROFILE_JOB = Job("run_profile_job", "profiles")
REFRESH_PROFILE = Job("refresh_profile", "profiles")

JOBS = (
    PROCESS_EVENT, REFRESH_SUMMARY, LINK_ENTITIES, ERASE_USER, DELIVER_WEBHOOK, RUN_PROFILE_JOB,
    REFRESH_PROFILE,
)  # fmt: skip


def project_args() -> dict[str, int]:
    """Each queue's position of the project id in its messages' arguments."""
    found: dict[str, int] = {}
    for job in JOBS:
        if found.setdefault(job.queue_name, job.project_arg) != job.project_arg:
            raise ValueError(f"{job}: the queue's jobs place the project id apart")
    return found
