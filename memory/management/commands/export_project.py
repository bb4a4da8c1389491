"""Write one project, everything its memory is made of, to a JSON Lines file (docs/moving.md).

A thin wrapper around memory.queries.transfer.export_records: one snapshot of the project
written line by line to a temporary file beside PATH, renamed to PATH once complete (a failed
export leaves no partial file); gzip when PATH ends in .gz.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs shipped

from memory.queries.transfer import export_records
from memory.transfer_format import END, RECORD_TYPES
from tenants.models import Project


class Command(BaseCommand):
    help = (
        "Write the project ORG/PROJECT (or --project-id) to PATH as a JSON Lines project file "
        "for backup or to move it to another engram instance with import_project: a header "
        "line (format engram-project version 1, engram version, source project, embedding "
        "model and dimensions, record counts), then one record a line: the graph's entities "
        "and relations (valid and invalidated, with their times and memory ids), add "
        "requests (the source messages), memories in every state with every version, "
        "supersession links, embeddings (base64 float32), metadata, categories, "
        "immutability, times and expiration, their history, feedback, scope summaries, "
        "memory-entity links and entity-name vectors; an end line with the counts. Rows "
        "erased or redacted in the project are not in it. Gzip when PATH ends in .gz. "
        "One consistent snapshot; written to a temporary file renamed to PATH at the end. "
        "Not in the file: API keys, members, the access log, idempotency keys, usage counters "
        "of erased requests, exports made through the API."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="Output file (.jsonl, or .jsonl.gz to compress).")
        parser.add_argument("--org", help="Organization name.")
        parser.add_argument("--project", help="Project name within the org.")
        parser.add_argument("--project-id", help="The project's id (instead of --org/--project).")

    def handle(self, *args: Any, **options: Any) -> None:
        project = find_project(options)
        path = Path(options["path"])
        if not path.parent.is_dir():
            raise CommandError(f"No directory {path.parent}.")
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        os.close(handle)
        counts: dict[str, int] = {}
        try:
            with _open(Path(temporary), path.name.endswith(".gz")) as out:
                records = export_records(project)
                first = next(records)
                out.write(_line(first))
                total = sum(first["counts"].values())
                quiet = options["verbosity"] == 0 or not sys.stderr.isatty()
                with tqdm(total=total, unit="rec", disable=quiet, file=sys.stderr) as bar:
                    for record in records:
                        out.write(_line(record))
                        if record["type"] != END:
                            counts[record["type"]] = counts.get(record["type"], 0) + 1
                            bar.update()
            Path(temporary).replace(path)
        finally:
            Path(temporary).unlink(missing_ok=True)
        if options["verbosity"] > 0:
            for kind in RECORD_TYPES:
                self.stdout.write(f"{kind}: {counts.get(kind, 0)}")
            self.stdout.write(
                self.style.SUCCESS(f"exported {project} ({sum(counts.values())} records) to {path}")
            )


def find_project(options: dict[str, Any]) -> Project:
    """The project named by --project-id, or by --org and --project."""
    projects = Project.objects.select_related("organization")
    if options.get("project_id"):
        if options.get("org") or options.get("project"):
            raise CommandError("Give --project-id or --org/--project, not both.")
        try:
            return projects.get(pk=uuid.UUID(str(options["project_id"])))
        except (Project.DoesNotExist, ValueError):
            raise CommandError(f"No project with id {options['project_id']}.") from None
    if not options.get("org") or not options.get("project"):
        raise CommandError("Name the project: --org and --project, or --project-id.")
    try:
        return projects.get(organization__name=options["org"], name=options["project"])
    except Project.DoesNotExist:
        raise CommandError(f"No project {options['org']}/{options['project']}.") from None


def _open(path: Path, compress: bool) -> IO[str]:
    if compress:
        return gzip.open(path, "wt", encoding="utf-8")
    return path.open("w", encoding="utf-8")


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
