"""Delete the memories whose expiration date has passed, in every project.

Expired memories are already hidden from search and lists (unless `show_expired`); this makes
the deletion explicit and recorded: each one gets a DELETE history row whose actor is
`command:purge_expired`. Deletes are soft, as everywhere in engram; erasing the text for good
is the GDPR erasure's job. It also deletes the add requests' Idempotency-Key records older than
ENGRAM_IDEMPOTENCY_HOURS (already ignored by the API). Run it daily (cron, a Kubernetes CronJob).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from memory import actions, queries
from memory.actions import Actor
from tenants.db import project_context
from tenants.models import Project


class Command(BaseCommand):
    help = (
        "Delete (softly, with history) every active memory whose expiration_date is before "
        "today (UTC), project by project. --dry-run counts without deleting."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count, change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        today = timezone.now().date()
        keys_before = timezone.now() - timedelta(hours=settings.ENGRAM_IDEMPOTENCY_HOURS)
        actor = Actor.command("purge_expired")
        total = 0
        for project in Project.objects.order_by("created_at"):
            with project_context(project.pk):
                expired = queries.expired(project.pk, before=today)
                if options["dry_run"]:
                    count = expired.count()
                else:
                    count = actions.do_delete_memories(expired, actor=actor)
                    actions.do_prune_idempotency_keys(project.pk, expired_before=keys_before)
            total += count
            if count and options["verbosity"] > 1:
                self.stdout.write(f"{project}: {count}")
        verb = "would delete" if options["dry_run"] else "deleted"
        if options["verbosity"] > 0:
            self.stdout.write(self.style.SUCCESS(f"{verb} {total} expired memories"))
