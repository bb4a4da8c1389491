"""Delete what is past its time and erase for good what was deleted long enough ago, in every
project (GDPR storage limitation).

- memories past their expiration date are deleted (the soft delete, with a DELETE history
  row whose actor is `command:purge_expired`; already hidden from search and lists unless
  `show_expired`), and so erased with the other deleted ones once their retention has run;
- memories deleted more than the project's `deleted_retention_days` ago are erased for good
  (until then a delete is restorable);
- the messages, metadata, results and graph summary of add requests older than the
  project's `event_retention_days` are erased (the request rows stay, with status, usage and
  timings, for the operators' figures), and the finished webhook deliveries as old (their log
  holds ids, no text; pending ones stay);
- Idempotency-Key records older than ENGRAM_IDEMPOTENCY_HOURS are deleted (already ignored).

Memories go through the one database-side path (engram_erase_memories, as a redaction but
deleting the rows and their history), event payloads through engram_purge_events; each
writes a purge record with the counts (no text) when it erased something. A project's empty
retention field means the server default (ENGRAM_DELETED_RETENTION_DAYS, 30;
ENGRAM_EVENT_RETENTION_DAYS, 90); 0 keeps for ever. Idempotent: a second run finds nothing.
Run it daily (cron, a Kubernetes CronJob).
"""

from __future__ import annotations

import sys
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone
from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs shipped

from memory import actions, queries
from memory.actions import Actor
from tenants.db import project_context
from tenants.models import Project
from webhooks.actions import do_prune_deliveries


class Command(BaseCommand):
    help = (
        "Erase for good, project by project: memories past their expiration date, memories "
        "deleted longer ago than the retention period, and the messages and results of add "
        "requests older than theirs (rows kept), with the finished webhook deliveries as old; "
        "prune old Idempotency-Key records. Prints "
        "the rows per store. --dry-run counts and changes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count, change nothing")
        parser.add_argument(
            "--no-progress", action="store_true", help="no progress bar (none off a terminal)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run = bool(options["dry_run"])
        now = timezone.now()
        keys_before = now - timedelta(hours=settings.ENGRAM_IDEMPOTENCY_HOURS)
        actor = Actor.command("purge_expired")
        totals: Counter[str] = Counter()
        quiet = options["no_progress"] or options["verbosity"] == 0 or not sys.stderr.isatty()
        projects = list(Project.objects.order_by("created_at"))
        for project in tqdm(projects, desc="projects", unit="project", disable=quiet):
            counts = purge_project(project, now, actor=actor, dry_run=dry_run, progress=not quiet)
            if not dry_run:
                actions.do_prune_idempotency_keys(project.pk, expired_before=keys_before)
            totals.update(counts)
            if any(counts.values()) and options["verbosity"] > 1:
                listed = ", ".join(f"{store} {n}" for store, n in counts.items() if n)
                self.stdout.write(f"{project}: {listed}")
        if options["verbosity"] > 0:
            for store, count in totals.items():
                self.stdout.write(f"{store}: {count}")
            would = "would " if dry_run else ""
            self.stdout.write(
                self.style.SUCCESS(
                    f"{would}delete {totals['expired']} expired memories; {would}erase "
                    f"{totals['memories']} deleted memories and the payloads of "
                    f"{totals['events']} add requests"
                )
            )


def purge_project(
    project: Project, now: datetime, *, actor: Actor, dry_run: bool, progress: bool = False
) -> Counter[str]:
    """Delete the expired memories of one project, erase the deleted ones past retention in
    chunks (one transaction each), then old event payloads. Returns the rows per store
    (`expired`: memories deleted now)."""
    policy = queries.retention(project, now)
    counts: Counter[str] = Counter(expired=0, **dict.fromkeys(actions.MEMORY_ERASURE_STORES, 0))
    with project_context(project.pk):
        expired = queries.expired(project.pk, before=policy.today)
        if dry_run:
            counts["expired"] = expired.count()
        else:
            counts["expired"] = actions.do_delete_memories(expired, actor=actor)
        due = queries.retention_due(project.pk, policy)
    chunks = range(0, len(due), actions.RETENTION_CHUNK)
    # A second bar, under the projects' one, when a project has several chunks to erase.
    shown = progress and len(chunks) > 1
    for start in tqdm(chunks, desc=str(project), unit="chunk", leave=False, disable=not shown):
        chunk = due[start : start + actions.RETENTION_CHUNK]
        counts.update(actions.do_purge_memories(project.pk, chunk, actor=actor, dry_run=dry_run))
    if policy.events_before is not None:
        payloads = actions.do_purge_event_payloads(
            project.pk, before=policy.events_before, actor=actor, dry_run=dry_run
        )
        # Summed: an add request may count once for a purged memory's text, once for its age.
        counts["events"] += payloads["events"]
        counts["history"] += payloads["history"]
        counts["webhook deliveries"] = do_prune_deliveries(
            project.pk, before=policy.events_before, dry_run=dry_run
        )
    return counts
