"""Bring a Mem0 user's memories into engram (docs/moving.md, "Coming from Mem0")."""

from __future__ import annotations

import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs shipped

from memory.actions.transfer import (
    Outcome,
    Target,
    TransferConflictError,
    do_import_batch,
    do_prepare_project,
)
from memory.mem0_sources import (
    FileSource,
    OssSource,
    PlatformSource,
    Source,
    SourceError,
    SourceMemory,
    engram_id,
    history_records,
    memory_record,
    supersession_order,
)
from memory.queries.transfer import embedding_dimensions, present_memory_ids
from memory.transfer_format import HISTORY, MEMORY, FormatError
from tenants.models import Project

BATCH = 200


class Command(BaseCommand):
    help = (
        "Import memories from Mem0 into the project ORG/PROJECT (created if missing) or the "
        "existing --project-id. The source is one of: --api-url, a Mem0 Platform or any server "
        "that speaks its API (another engram too), with its API key; --oss-url, a Mem0 "
        "open-source server (server/main.py), with its X-API-Key if it wants one; --file, a "
        "Mem0 export file (the JSON of an export or of get_all, or JSON Lines of memories). "
        "The key is --api-key, or --api-key-file naming a file that holds it. Kept: texts, scope "
        "ids, metadata, categories, created and updated times, expiration dates, immutability, "
        "superseded memories with their replaced_by links, and each memory's history (read "
        "from the source per memory; --no-history skips it and writes one ADD row each). Ids "
        "are kept: Mem0's are UUIDs; any other id becomes a UUID derived from it and is kept "
        "in the memory's metadata as mem0_id (find it with the metadata filter). Texts are "
        "embedded by this instance's embedder. Idempotent and resumable: memories whose id is "
        "in the project already are skipped before anything is fetched or embedded for them, "
        "so running it again imports nothing twice and a run that stopped finishes the rest."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--api-url", help="A Mem0 Platform API, e.g. https://api.mem0.ai")
        source.add_argument("--oss-url", help="A Mem0 open-source server's base URL")
        source.add_argument("--file", help="A Mem0 export file (.json or .jsonl)")
        parser.add_argument("--api-key", help="The source's API key")
        parser.add_argument(
            "--api-key-file", help="A file holding the key (kept out of the process list)"
        )
        parser.add_argument("--org", help="Organization name of the target project.")
        parser.add_argument("--project", help="Target project name (created if missing).")
        parser.add_argument("--project-id", help="The target project's id (must exist).")
        parser.add_argument(
            "--new-ids",
            action="store_true",
            help="fresh ids (the source's id kept in metadata as mem0_id), for a source whose "
            "ids this instance holds already (another project of it)",
        )
        parser.add_argument(
            "--no-history", action="store_true", help="do not read each memory's history"
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=BATCH,
            help=f"memories per transaction (default {BATCH})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        size = options["batch_size"]
        if not 1 <= size <= 5_000:
            raise CommandError("--batch-size must be from 1 to 5000.")
        source = self.source(options)
        project = self.target(options)
        quiet = options["verbosity"] == 0 or not sys.stderr.isatty()
        try:
            memories = self.read(source, quiet)
            outcomes = self.load(
                source,
                project,
                memories,
                size=size,
                history=not options["no_history"],
                new_ids=options["new_ids"],
                quiet=quiet,
            )
        except SourceError as error:
            raise CommandError(f"{source.name}: {error}") from None
        except (FormatError, TransferConflictError) as error:
            raise CommandError(f"{source.name}: {error}") from None
        if isinstance(source, OssSource) and source.capped:
            self.stderr.write(
                "These scopes have 1000 memories or more; the open-source server lists no more "
                f"than 1000 of a scope, so the rest were not read: {', '.join(source.capped)}"
            )
        if options["verbosity"] > 0:
            memory, history = outcomes[MEMORY], outcomes[HISTORY]
            self.stdout.write(
                self.style.SUCCESS(
                    f"{project.organization.name}/{project.name} ({project.pk}): "
                    f"{memory.written} memories imported, {memory.skipped} already there; "
                    f"{history.written} history rows"
                )
            )

    def source(self, options: dict[str, Any]) -> Source:
        key = options.get("api_key") or ""
        if options.get("api_key_file"):
            try:
                key = Path(options["api_key_file"]).read_text().strip()
            except OSError as error:
                raise CommandError(f"--api-key-file: {error}") from None
        if options.get("file"):
            path = Path(options["file"])
            if not path.is_file():
                raise CommandError(f"No file {path}.")
            return FileSource(path)
        try:
            if options.get("api_url"):
                if not key:
                    raise CommandError("The Platform API needs --api-key or --api-key-file.")
                return PlatformSource(options["api_url"], key)
            return OssSource(options["oss_url"], key or None)
        except SourceError as error:
            raise CommandError(str(error)) from None

    def target(self, options: dict[str, Any]) -> Project:
        if options.get("project_id"):
            if options.get("org") or options.get("project"):
                raise CommandError("Give --project-id or --org/--project, not both.")
            try:
                return do_prepare_project(project_id=uuid.UUID(str(options["project_id"])))[0]
            except (Project.DoesNotExist, ValueError):
                raise CommandError(f"No project with id {options['project_id']}.") from None
        if not options.get("org") or not options.get("project"):
            raise CommandError("Name the target: --org and --project, or --project-id.")
        return do_prepare_project(organization=options["org"], name=options["project"])[0]

    def read(self, source: Source, quiet: bool) -> list[SourceMemory]:
        """Every memory of the source, each checked (the list is read whole: a memory engram
        can't hold stops the command before anything is written, and supersession links are
        put in order)."""
        with tqdm(desc="reading", unit="mem", disable=quiet, file=sys.stderr) as bar:
            found = []
            for memory in source.memories():
                found.append(memory)
                bar.update(1)
        known, now = {m.id for m in found}, datetime.now(UTC)
        for memory in found:
            memory_record(memory, known=known, now=now)
        return supersession_order(found)

    def load(
        self,
        source: Source,
        project: Project,
        memories: list[SourceMemory],
        *,
        size: int,
        history: bool,
        new_ids: bool,
        quiet: bool,
    ) -> dict[str, Outcome]:
        target = Target(
            project.pk, embedding_dimensions(), new_ids, reembed=True, link_entities=True
        )
        known = {m.id for m in memories}
        now = datetime.now(UTC)
        outcomes = {MEMORY: Outcome(), HISTORY: Outcome()}
        with tqdm(
            total=len(memories), desc="importing", unit="mem", disable=quiet, file=sys.stderr
        ) as bar:
            for start in range(0, len(memories), size):
                batch = memories[start : start + size]
                ids = {m.id: target.uid(engram_id(m.id)) for m in batch}
                there = present_memory_ids(project.pk, [i for i in ids.values() if i])
                fresh = [m for m in batch if ids[m.id] not in there]
                outcomes[MEMORY].skipped += len(batch) - len(fresh)
                if history:
                    for memory in fresh:
                        memory.history = source.history(memory) or memory.history
                records = [
                    memory_record(m, known=known, now=now, keep_source_id=new_ids) for m in fresh
                ]
                rows = [r for m in fresh for r in history_records(m, now=now)]
                # History first: a run stopped between the two transactions has written
                # history rows (skipped by id when run again) but not the memories, which the
                # next run then imports; the other way round it would skip their history.
                written = do_import_batch(target, HISTORY, rows)
                outcomes[HISTORY].written += written.written
                done = do_import_batch(target, MEMORY, records)
                outcomes[MEMORY].written += done.written
                outcomes[MEMORY].skipped += done.skipped
                bar.update(len(batch))
        return outcomes
