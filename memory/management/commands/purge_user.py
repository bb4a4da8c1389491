"""Erase one end user of one project from every store, for good (GDPR right to erasure).

A thin wrapper around memory.actions.do_erase_user, which calls the database function
`engram_erase_user` (audit migrations 0008, 0010) in one transaction: the user's memories,
feedback, entity links, history, graph vertices (graph_entities) and edges (graph_relations,
with every edge touching those vertices), scope summaries, add requests and their queue
messages, and the exports holding any of them are deleted; in the access log the id is
replaced by a salted hash; a purge record (counts and that hash, no personal data, actor
`command:purge_user`) is written with it. It prints the rows per store.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory import actions
from memory.actions import Actor
from memory.models import SCOPE_MAX_LENGTH
from tenants.models import Project


class Command(BaseCommand):
    help = (
        "Erase USER (a user_id) of ORG/PROJECT from every store, for good: memories (with "
        "embeddings and keyword documents), feedback, entity links, the user's entities and "
        "relations in the project's graph (graph_entities, graph_relations: with every edge "
        "touching those entities), history, scope summaries, add requests and their queue "
        "messages, exports holding any of them; the id is replaced by a salted hash in the "
        "access log. Prints the rows per store and writes a purge record (counts, no personal "
        "data). Idempotent. --dry-run counts and changes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--org", required=True, help="Organization name.")
        parser.add_argument("--project", required=True, help="Project name within the org.")
        parser.add_argument("--user-id", required=True, help="The user_id to erase (exact).")
        parser.add_argument("--dry-run", action="store_true", help="count, change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        user_id: str = options["user_id"]
        if not user_id or len(user_id) > SCOPE_MAX_LENGTH:
            raise CommandError(f"--user-id must have 1 to {SCOPE_MAX_LENGTH} characters.")
        try:
            project = Project.objects.get(
                organization__name=options["org"], name=options["project"]
            )
        except Project.DoesNotExist:
            raise CommandError(f"No project {options['org']}/{options['project']}.") from None
        dry_run = bool(options["dry_run"])
        counts = actions.do_erase_user(
            project, user_id, actor=Actor.command("purge_user"), dry_run=dry_run
        )
        if options["verbosity"] > 0:
            verb = "would erase" if dry_run else "erased"
            for store, count in counts.items():
                self.stdout.write(f"{store}: {count}")
            total = sum(counts.values())
            self.stdout.write(self.style.SUCCESS(f"{verb} {total} rows in {len(counts)} stores"))
