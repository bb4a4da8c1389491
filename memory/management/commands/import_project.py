"""Load a project file made by export_project into a project of this instance (docs/moving.md).

Two passes over the file, each streaming it line by line (a line's length capped). The check:
every line read and checked, each record by the API's rules (check_record: what the API would
not store is not imported either), and every batch written as the import would write it, graph
included, inside one transaction that is then rolled back (no embedding), so a truncated or
corrupt file, a format version this engram does not read, a value the API or the database
refuses, or a kept id another project holds is refused with nothing written, not even the
project. The import: the same records through the same rules, batch by batch through
memory.actions.transfer, one transaction each; stopped half way (a crash, Ctrl-C), running the
command again skips what is there and writes the rest.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from rest_framework import serializers
from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs shipped

from config.inputs import UnsafeInputError, check_json
from memory.actions.transfer import (
    Outcome,
    Target,
    TransferConflictError,
    do_import_batch,
    do_prepare_project,
)
from memory.api.serializers.fields import (
    JSONObjectField,
    ScopeIdField,
    TextField,
    validate_metadata,
)
from memory.models import SCOPE_FIELDS
from memory.queries.transfer import embedding_dimensions, embedding_model
from memory.text.recognise import MAX_NAME
from memory.transfer_format import (
    END,
    ENTITY,
    ENTITY_LINK,
    ENTITY_VECTOR,
    EVENT,
    FEEDBACK,
    FORMAT,
    HISTORY,
    MEMORY,
    RECORD_TYPES,
    RELATION,
    SUMMARY,
    VERSION,
    FormatError,
    parse_record,
    read_lines,
)
from tenants.actions import PROJECT_SETTINGS
from tenants.models import Project
from tenants.project_serializers import ProjectUpdateSerializer

BATCH = 500


class Command(BaseCommand):
    help = (
        "Load PATH, a project file written by export_project (.jsonl, or gzip), into the "
        "project ORG/PROJECT (created if missing, with the source project's settings and, "
        "ids kept, its id when free) or the existing --project-id. First the whole file is "
        "checked, each record by the API's rules (text lengths, metadata, scope ids, JSON "
        "depth and size, entity names), and written in a transaction that is rolled back: a "
        "truncated or corrupt file, a line longer than any record, another format version, a "
        "value the API or the database refuses, or a kept id that another project of this "
        "instance holds is refused with a clear message and nothing written, not even the "
        "project (--check stops there). "
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
        org, name = options["org"], options["project"]
        if not Project.objects.filter(organization__name=org, name=name).exists():
            check_project_settings(header["project"])
        try:
            return do_prepare_project(
                organization=org, name=name, source=header["project"], keep_id=not new_ids
            )
        except ValueError as error:
            raise CommandError(f"--org/--project: {error}.") from None

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


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of every line, the header included; FormatError at the first
    line that is too long, not JSON or not a JSON object, or where the file cannot be read."""
    for number, text in read_lines(path):
        yield number, parse_record(number, text)


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
        try:
            check_record(kind, record)
        except FormatError as error:
            raise FormatError(f"line {number}: {error}") from None
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


# -- the API's rules ---------------------------------------------------------------------------
# What a record would store, refused where the API refuses it, by the API's own fields and
# checks (memory.api.serializers.fields, config.inputs): a file, a Mem0 export or an API
# request, one set of rules (issue #47). The shapes and types of the format are the format's
# (memory.transfer_format); these are the limits.


class _Metadata(JSONObjectField):
    """A memory's metadata, as an add or an update takes it (JSONObjectField, then
    validate_metadata)."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        return validate_metadata(super().to_internal_value(data))


def _scoped(**fields: serializers.Field[Any, Any, Any, Any]) -> dict[str, Any]:
    """The scope ids, as an add stores them, and `fields`."""
    return {name: ScopeIdField(stored=True) for name in SCOPE_FIELDS} | fields


def _name() -> serializers.CharField:
    """An entity's name: at most MAX_NAME characters, the recogniser's and the extractor's."""
    return serializers.CharField(max_length=MAX_NAME, trim_whitespace=False)


# The API's fields by record type and key; each used unbound, as memory.api.serializers.fields
# cleans a scope id (a serializer a record would cost a copy of every field).
_RULES: dict[str, dict[str, serializers.Field[Any, Any, Any, Any]]] = {
    ENTITY: _scoped(
        name=_name(),
        display_name=serializers.CharField(
            max_length=MAX_NAME, trim_whitespace=False, allow_blank=True
        ),
    ),
    RELATION: _scoped(),
    EVENT: _scoped(),
    MEMORY: _scoped(
        text=TextField(),
        context_before=TextField(allow_blank=True),
        context_after=TextField(allow_blank=True),
        metadata=_Metadata(),
    ),
    HISTORY: _scoped(
        old_memory=TextField(allow_null=True, allow_blank=True),
        new_memory=TextField(allow_null=True, allow_blank=True),
        metadata=_Metadata(),
    ),
    FEEDBACK: {"feedback_reason": TextField(allow_null=True, allow_blank=True)},
    SUMMARY: _scoped(text=TextField(allow_blank=True)),
    ENTITY_LINK: _scoped(entity_name=_name()),
    ENTITY_VECTOR: _scoped(entity_name=_name()),
}


def check_record(kind: str, record: dict[str, Any]) -> None:
    """Refuse (FormatError) a record holding what the API would not store: JSON deeper or
    larger than a request body may be, texts and metadata past their limits, a scope id no add
    takes, a memory without one, an entity name longer than an entity's. Scope ids are cleaned
    as an add cleans them (the record is changed in place). What a record lacks, or holds of
    the wrong type, the format's reader says (memory.transfer_format)."""
    try:
        # A record's fields sit where a request's do, one level down, so its JSON is checked as
        # a body; an event's JSON fields are each a body of their own (json_checked, per field).
        if kind != EVENT:
            check_json(record, kind)
    except UnsafeInputError as error:
        raise FormatError(str(error).rstrip(".")) from None
    graph = kind in (ENTITY, RELATION)
    values = record.get("properties") if graph else record
    if not isinstance(values, Mapping):
        return
    for key, field in _RULES[kind].items():
        if key not in values:
            continue
        value = values[key]
        if graph and key in SCOPE_FIELDS and value == "":
            continue  # a graph property's unset scope id
        try:
            cleaned = field.run_validation(value)
        except serializers.ValidationError as error:
            raise FormatError(_first_error(f"{kind} {key}", error.detail)) from None
        if not graph and key in SCOPE_FIELDS:
            record[key] = cleaned
    if kind == MEMORY and not any(record.get(name) for name in SCOPE_FIELDS):
        raise FormatError("a memory needs a user_id, agent_id, app_id or run_id")


def check_project_settings(source: Any) -> None:
    """The source project's settings an import copies into the project it creates, by the
    rules of the projects API (PATCH)."""
    if not isinstance(source, Mapping):
        return
    keys = [key for key in PROJECT_SETTINGS if key != "name"]
    given = {key: source[key] for key in keys if key in source}
    if not given:
        return
    rules = ProjectUpdateSerializer(data=given)
    if not rules.is_valid():
        raise FormatError(_first_error("the header's project", rules.errors))


def _first_error(where: str, errors: Any) -> str:
    while isinstance(errors, Mapping):
        key, errors = next(iter(errors.items()))
        if key != "non_field_errors":
            where = f"{where} {key}"
    while isinstance(errors, list) and errors:
        errors = errors[0]
    return f"{where}: {str(errors).rstrip('.')}"
