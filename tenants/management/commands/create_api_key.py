"""Mint an API key for a project: the way operators and `make run` get a working key.

The raw key is printed once, as the last line, so scripts can take it with `tail -n 1`.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenants.actions import do_create_api_key


class Command(BaseCommand):
    help = (
        "Create an API key for ORG/PROJECT (both created if missing). "
        "The raw key is shown once, as the last line of output; only its hash is stored."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--org", required=True, help="Organization name.")
        parser.add_argument("--project", required=True, help="Project name within the org.")
        parser.add_argument("--name", default="default", help="A label for the key.")
        parser.add_argument("--user", help="Username of the member creating the key (optional).")

    def handle(self, *args: Any, **options: Any) -> None:
        org, project = options["org"].strip(), options["project"].strip()
        if not org or not project:
            raise CommandError("--org and --project must not be empty.")
        created_by = None
        if options["user"]:
            try:
                created_by = get_user_model().objects.get(username=options["user"])
            except get_user_model().DoesNotExist:
                raise CommandError(f"No user named {options['user']!r}.") from None
        new = do_create_api_key(
            org_name=org, project_name=project, name=options["name"], created_by=created_by
        )
        if options["verbosity"] > 0:
            self.stdout.write(
                self.style.SUCCESS(
                    f"Created API key {new.key.name!r} ({new.key.prefix}…) for {org}/{project} "
                    f"(org_id {new.key.project.organization_id}, project_id {new.key.project_id})."
                )
            )
            self.stdout.write("Store it now; it cannot be shown again:")
        self.stdout.write(new.raw)
