"""Give every linked entity name its vector, project by project: the names linked before
matching by meaning existed (memory 0020) are otherwise matched by name only until a new memory
mentions them. Idempotent: a second run makes nothing. Run it once after upgrading.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from memory.graph import embed_entity_names
from tenants.models import Project


class Command(BaseCommand):
    help = (
        "Embed the entity names that have links but no vector (linked before the upgrade that "
        "added search's matching by meaning), in every project. Prints how many were embedded."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        total = 0
        for project in Project.objects.order_by("created_at"):
            made = embed_entity_names(project.pk)
            total += made
            if made and options["verbosity"] > 1:
                self.stdout.write(f"{project}: {made}")
        if options["verbosity"] > 0:
            self.stdout.write(self.style.SUCCESS(f"embedded {total} entity names"))
