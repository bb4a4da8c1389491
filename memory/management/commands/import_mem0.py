"""Bring a Mem0 user's memories into engram (docs/moving.md, "Coming from Mem0").

Three steps. Read: every memory of the source, and the history of each the project does not
hold yet, each made into the project file's records and checked by the API's rules
(import_project.check_record). Check: every batch written as the import writes it, in one
transaction that is rolled back (import_project's check), so a memory the API or the database
refuses, or an id another project holds, stops the command with nothing written, not even the
project. Import: batch by batch, one transaction each; stopped half way, running it again
skips what is there.
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs shipped

from memory.actions.transfer import (
    Outcome,
    Target,
    TransferConflictError,
    do_import_batch,
    do_prepare_project,
)
from memory.management.commands.import_project import check_record
from memory.mem0_sources import (
    FileSource,
    OssSource,
    PlatformSource,
    Source,
    SourceError,
    engram_id,
    history_records,
    memory_record,
    supersession_order,
)
from memory.queries.transfer import embedding_dimensions, present_memory_ids
from memory.transfer_format import HISTORY, MEMORY, FormatError
from tenants.models import Project

BATCH = 200


@dataclass
class Prepared:
    """A source memory as the records an import writes: its memory and its history rows."""

    memory: dict[str, Any]
    history: list[dict[str, Any]]


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
        existing = self.existing(options)
        quiet = options["verbosity"] == 0 or not sys.stderr.isatty()
        new_ids = bool(options["new_ids"])
        try:
            history = not options["no_history"]
            prepared, there = self.prepare(source, existing, new_ids, history, quiet)
            self.rehearse(options, prepared, new_ids=new_ids, size=size)
        except (SourceError, FormatError, TransferConflictError) as error:
            refusal = str(error).rstrip(".")
            raise CommandError(f"{source.name}: {refusal}. Nothing was written.") from None
        project = self.target(options)
        target = Target(
            project.pk, embedding_dimensions(), new_ids, reembed=True, link_entities=True
        )
        with tqdm(
            total=len(prepared), desc="importing", unit="mem", disable=quiet, file=sys.stderr
        ) as bar:
            try:
                outcomes = self.load(target, prepared, size=size, bar=bar)
            except (FormatError, TransferConflictError) as error:
                raise CommandError(
                    f"{source.name}: {str(error).rstrip('.')}. The batch being written was "
                    "rolled back; the batches before it are in the project: run the command "
                    "again to finish it once the cause is fixed."
                ) from None
        outcomes[MEMORY].skipped += there
        if isinstance(source, OssSource) and source.capped:
            self.stderr.write(
                "These scopes have 1000 memories or more; the open-source server lists no more "
                f"than 1000 of a scope, so the rest were not read: {', '.join(source.capped)}"
            )
        if options["verbosity"] > 0:
            memory, rows = outcomes[MEMORY], outcomes[HISTORY]
            self.stdout.write(
                self.style.SUCCESS(
                    f"{project.organization.name}/{project.name} ({project.pk}): "
                    f"{memory.written} memories imported, {memory.skipped} already there; "
                    f"{rows.written} history rows"
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

    def existing(self, options: dict[str, Any]) -> Project | None:
        """The target project if it exists already (None: the import creates it, once the
        check has passed)."""
        if options.get("project_id"):
            if options.get("org") or options.get("project"):
                raise CommandError("Give --project-id or --org/--project, not both.")
            try:
                return do_prepare_project(project_id=uuid.UUID(str(options["project_id"])))[0]
            except (Project.DoesNotExist, ValueError):
                raise CommandError(f"No project with id {options['project_id']}.") from None
        if not options.get("org") or not options.get("project"):
            raise CommandError("Name the target: --org and --project, or --project-id.")
        found = Project.objects.filter(
            organization__name=options["org"], name=options["project"]
        ).first()
        return found

    def target(self, options: dict[str, Any]) -> Project:
        """The target project, created if missing."""
        if options.get("project_id"):
            return do_prepare_project(project_id=uuid.UUID(str(options["project_id"])))[0]
        try:
            return do_prepare_project(organization=options["org"], name=options["project"])[0]
        except ValueError as error:
            raise CommandError(f"--org/--project: {error}.") from None

    def prepare(
        self,
        source: Source,
        existing: Project | None,
        new_ids: bool,
        history: bool,
        quiet: bool,
    ) -> tuple[list[Prepared], int]:
        """The records of every memory of the source the project does not hold yet, in the
        order they are written (each after the memory that replaced it), each checked, with
        its history (read from the source unless `history` is off); and how many it holds.
        The whole source is read before anything is written."""
        with tqdm(desc="reading", unit="mem", disable=quiet, file=sys.stderr) as bar:
            found = []
            for memory in source.memories():
                found.append(memory)
                bar.update(1)
        known, now = {m.id for m in found}, datetime.now(UTC)
        ordered = supersession_order(found)
        there: set[uuid.UUID | None] = set()
        if existing is not None:
            # The ids the project maps them to (--new-ids: uuid5 of the project and the id).
            ids = Target(existing.pk, 0, new_ids)
            mapped = [ids.uid(engram_id(m.id)) for m in ordered]
            for start in range(0, len(mapped), BATCH):
                chunk = [i for i in mapped[start : start + BATCH] if i is not None]
                there |= set(present_memory_ids(existing.pk, chunk))
            ordered = [m for m, i in zip(ordered, mapped, strict=True) if i not in there]
        prepared = []
        for memory in ordered:
            if history:
                memory.history = source.history(memory) or memory.history
            record = memory_record(memory, known=known, now=now, keep_source_id=new_ids)
            rows = history_records(memory, now=now)
            for kind, item in ((MEMORY, record), *((HISTORY, row) for row in rows)):
                try:
                    check_record(kind, item)
                except FormatError as error:
                    raise SourceError(f"memory {memory.id}: {error}.") from None
            prepared.append(Prepared(record, rows))
        return prepared, len(found) - len(ordered)

    def rehearse(
        self, options: dict[str, Any], prepared: list[Prepared], *, new_ids: bool, size: int
    ) -> None:
        """Every batch written as the import writes it (without embedding), in a transaction
        that is then rolled back, the project too if it is made here: FormatError or
        TransferConflictError where the import would stop."""
        with transaction.atomic():
            project = self.target(options)
            dimensions = embedding_dimensions()
            target = Target(project.pk, dimensions, new_ids, reembed=True, dry_run=True)
            self.load(target, prepared, size=size, bar=None)
            transaction.set_rollback(True)

    def load(
        self, target: Target, prepared: list[Prepared], *, size: int, bar: Any
    ) -> dict[str, Outcome]:
        outcomes = {MEMORY: Outcome(), HISTORY: Outcome()}
        for start in range(0, len(prepared), size):
            batch = prepared[start : start + size]
            # Written by a run that stopped: skipped before anything is embedded for them.
            ids = {target.uid(uuid.UUID(p.memory["id"])) for p in batch}
            there = present_memory_ids(target.project_id, [i for i in ids if i is not None])
            fresh = [p for p in batch if target.uid(uuid.UUID(p.memory["id"])) not in there]
            outcomes[MEMORY].skipped += len(batch) - len(fresh)
            # History first: a run stopped between the two transactions has written history
            # rows (skipped by id when run again) but not the memories, which the next run then
            # imports; the other way round it would skip their history.
            written = do_import_batch(target, HISTORY, [r for p in fresh for r in p.history])
            outcomes[HISTORY].written += written.written
            done = do_import_batch(target, MEMORY, [p.memory for p in fresh])
            outcomes[MEMORY].written += done.written
            outcomes[MEMORY].skipped += done.skipped
            if bar is not None:
                bar.update(len(batch))
        return outcomes
