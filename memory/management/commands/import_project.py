"""Load a project file made by export_project into a project of this instance (docs/moving.md).

Two passes over the file, each streaming it line by line. The check: every line read and
checked, and every batch written as the import would write it, inside one transaction that is
then rolled back (no embedding, no graph write), so a truncated or corrupt file, a format
version this engram does not read, or a kept id another project holds is refused with nothing
written. The import: batch by batch through memory.actions.transfer, one transaction each;
stopped half way (a crash, Ctrl-C), running the command again skips what is there and writes
the rest.
"""

from __future__ import annotations

import gzip
import json
import sys
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

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
from memory.queries.transfer import embedding_dimensions, embedding_model
from memory.transfer_format import END, FORMAT, RECORD_TYPES, VERSION, FormatError
from tenants.models import Project

BATCH = 500


class Command(BaseCommand):
    help = (
        "Load PATH, a project file written by export_project (.jsonl, or gzip), into the "
        "project ORG/PROJECT (created if missing, with the source project's settings and, "
        "ids kept, its id when free) or the existing --project-id. First the whole file is "
        "checked and written in a transaction that is rolled back: a truncated or corrupt "
        "file, another format version, or a kept id that another project of this instance "
        "holds is refused with a clear message and nothing written (--check stops there). "
        "Then it is written in batches of --batch-size records, one transaction each. Ids "
        "are kept (a restored backup keeps every id the application stored); --new-ids copies "
        "under fresh ids (uuid5 of the target project and the old id) with every reference "
        "mapped. Graph vertex and edge ids are always new. Idempotent and resumable: a row "
        "whose id is in the target already is skipped, so running it twice imports nothing "
        "twice and a run that stopped half way finishes the rest. Embeddings are written as "
        "they are when the file's embedding model is this instance's, and made again from "
        "the texts when not. No history row is added and no job queued; an add request "
        "that was running on the source comes in PENDING (sweep_events sends it again). A "
        "progress bar on a terminal; counts written and skipped at the end. The format: "
        "docs/moving.md."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="The project file (.jsonl or .jsonl.gz).")
        parser.add_argument("--org", help="Organization name of the target project.")
        parser.add_argument("--project", help="Target project name (created if missing).")
        parser.add_argument("--project-id", help="The target project's id (must exist).")
        parser.add_argument(
            "--new-ids",
            action="store_true",
            help="fresh ids (uuid5 of the target project and the old id), references mapped",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=BATCH,
            help=f"records per transaction (default {BATCH})",
        )
        parser.add_argument("--check", action="store_true", help="check only, write nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["path"])
        if not path.is_file():
            raise CommandError(f"No file {path}.")
        size = options["batch_size"]
        if not 1 <= size <= 10_000:
            raise CommandError("--batch-size must be from 1 to 10000.")
        header = self.fail_clearly(lambda: read_header(path))
        reembed = header["embedding"]["model"] != embedding_model()
        new_ids = bool(options["new_ids"])

        def check() -> dict[str, Outcome]:
            with transaction.atomic():
                project, _ = self.target(options, header, new_ids)
                target = Target(project.pk, _dimensions(header), new_ids, reembed, dry_run=True)
                found = load(path, header, target, size, bar=None)
                transaction.set_rollback(True)
            return found

        self.fail_clearly(check)
        if options["check"]:
            self.stdout.write(self.style.SUCCESS(f"{path} is a valid project file."))
            return
        project, created = self.target(options, header, new_ids)
        target = Target(project.pk, _dimensions(header), new_ids, reembed)
        quiet = options["verbosity"] == 0 or not sys.stderr.isatty()
        total = sum(header["counts"].values())
        with tqdm(total=total, unit="rec", disable=quiet, file=sys.stderr) as bar:
            outcomes = self.fail_clearly(
                lambda: load(path, header, target, size, bar), writing=True
            )
        if options["verbosity"] > 0:
            self.summary(project, created, reembed, outcomes)

    def fail_clearly(self, step: Any, *, writing: bool = False) -> Any:
        """Run `step`; a refusal as a CommandError saying what was written."""
        after = (
            " The batch being written was rolled back; the batches before it are in the "
            "project: run the command again to finish it once the cause is fixed."
            if writing
            else " Nothing was written."
        )
        try:
            return step()
        except FormatError as error:
            raise CommandError(f"Not a valid project file: {error}.{after}") from None
        except TransferConflictError as error:
            raise CommandError(f"{error}{after}") from None

    def target(
        self, options: dict[str, Any], header: dict[str, Any], new_ids: bool
    ) -> tuple[Project, bool]:
        if options.get("project_id"):
            if options.get("org") or options.get("project"):
                raise CommandError("Give --project-id or --org/--project, not both.")
            try:
                wanted = uuid.UUID(str(options["project_id"]))
                return do_prepare_project(project_id=wanted)
            except (Project.DoesNotExist, ValueError):
                raise CommandError(f"No project with id {options['project_id']}.") from None
        if not options.get("org") or not options.get("project"):
            raise CommandError("Name the target: --org and --project, or --project-id.")
        return do_prepare_project(
            organization=options["org"],
            name=options["project"],
            source=header["project"],
            keep_id=not new_ids,
        )

    def summary(
        self, project: Project, created: bool, reembed: bool, outcomes: dict[str, Outcome]
    ) -> None:
        for kind in RECORD_TYPES:
            outcome = outcomes[kind]
            self.stdout.write(f"{kind}: {outcome.written} written, {outcome.skipped} skipped")
        if reembed:
            self.stdout.write("embeddings: made again (the file's model is not this instance's)")
        written = sum(o.written for o in outcomes.values())
        skipped = sum(o.skipped for o in outcomes.values())
        verb = "created and imported into" if created else "imported into"
        self.stdout.write(
            self.style.SUCCESS(
                f"{verb} {project.organization.name}/{project.name} ({project.pk}): "
                f"{written} records written, {skipped} already there"
            )
        )


def _dimensions(header: dict[str, Any]) -> int:
    """This instance's: a file of its model has them (read_header), another model's vectors
    are not read."""
    return embedding_dimensions()


# -- reading the file --------------------------------------------------------------------------


def _open(path: Path) -> IO[str]:
    with path.open("rb") as raw:
        magic = raw.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of every line, the header included; FormatError at the first
    line that is not a JSON object, or where the file cannot be read (gzip cut short)."""
    number = 0
    try:
        with _open(path) as lines:
            for number, line in enumerate(lines, start=1):
                try:
                    record = json.loads(line)
                except ValueError:
                    raise FormatError(f"line {number} is not JSON") from None
                if not isinstance(record, dict):
                    raise FormatError(f"line {number} is not a JSON object")
                yield number, record
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as error:
        raise FormatError(f"the file cannot be read after line {number} ({error})") from None


def read_header(path: Path) -> dict[str, Any]:
    """The header line, checked: the format, its version, the embedding, the counts."""
    first = next(_lines(path), None)
    if first is None:
        raise FormatError("the file is empty")
    header = first[1]
    if header.get("format") != FORMAT:
        raise FormatError(f"line 1 is not the header of an {FORMAT} file")
    if header.get("version") != VERSION:
        raise FormatError(
            f"the file is version {header.get('version')!r} of the format; this engram reads "
            f"version {VERSION}"
        )
    embedding = header.get("embedding")
    if not (
        isinstance(embedding, dict)
        and isinstance(embedding.get("model"), str)
        and isinstance(embedding.get("dimensions"), int)
    ):
        raise FormatError("the header names no embedding model and dimensions")
    same = embedding["model"] == embedding_model()
    if same and embedding["dimensions"] != embedding_dimensions():
        raise FormatError("the header's embedding dimensions are not this model's")
    counts = header.get("counts")
    if not isinstance(counts, dict) or not all(
        isinstance(counts.get(kind), int) and counts[kind] >= 0 for kind in RECORD_TYPES
    ):
        raise FormatError("the header's counts are missing or not numbers")
    if not isinstance(header.get("project"), dict):
        raise FormatError("the header names no source project")
    return header


def load(
    path: Path, header: dict[str, Any], target: Target, size: int, bar: Any
) -> dict[str, Outcome]:
    """Every record after the header, batch by batch (one type a batch); checks the order of
    the types, the end record, and the counts against the header's."""
    outcomes = {kind: Outcome() for kind in RECORD_TYPES}
    seen = dict.fromkeys(RECORD_TYPES, 0)
    batch: list[dict[str, Any]] = []
    first = 0
    end: dict[str, Any] | None = None
    rank = 0

    def flush() -> None:
        if not batch:
            return
        kind = batch[0]["type"]
        try:
            done = do_import_batch(target, kind, batch)
        except FormatError as error:
            raise FormatError(f"lines {first}-{first + len(batch) - 1}: {error}") from None
        outcomes[kind].written += done.written
        outcomes[kind].skipped += done.skipped
        if bar is not None:
            bar.update(len(batch))
        batch.clear()

    for number, record in _lines(path):
        if number == 1:
            continue
        if end is not None:
            raise FormatError(f"line {number} follows the end record")
        kind = record.get("type")
        if kind == END:
            flush()
            end = record
            continue
        if kind not in RECORD_TYPES:
            raise FormatError(f"line {number} has an unknown type {kind!r}")
        if RECORD_TYPES.index(kind) < rank:
            raise FormatError(f"line {number}: a {kind} record after the {RECORD_TYPES[rank]}s")
        if batch and (batch[0]["type"] != kind or len(batch) >= size):
            flush()
        rank = RECORD_TYPES.index(kind)
        if not batch:
            first = number
        batch.append(record)
        seen[kind] += 1
    flush()
    if end is None:
        raise FormatError("the file ends before its end record: it was cut short")
    for kind in RECORD_TYPES:
        if seen[kind] != header["counts"][kind] or seen[kind] != end.get("counts", {}).get(kind):
            raise FormatError(
                f"the file holds {seen[kind]} {kind} records; its header says "
                f"{header['counts'][kind]}"
            )
    return outcomes
