"""Memories read out of Mem0, for `manage.py import_mem0`: from the Platform's REST API (or any
server that speaks it: another engram, too), from a Platform export file, or from the Mem0
open-source server's REST API.

Each source yields `SourceMemory` values: the memory as the source describes it, its scope ids
checked, its times parsed, and its history (the source's ADD / UPDATE / DELETE rows) when the
source keeps one. Nothing here writes: memory.actions.transfer turns them into rows.

A source is input from outside: every field is checked for its type here (a wrong one raises
SourceError naming the memory and the field), times for the range the API takes; the records
made of them are checked by the API's rules (import_project.check_record) and by the project
file's reader (memory.transfer_format) before anything is written. A file is read a line at a
time (JSON Lines, each line's length capped), or whole when it is one JSON document of at most
MAX_DOCUMENT_BYTES.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urljoin, urlsplit

import httpx

from config.inputs import MAX_JSON_DEPTH
from memory.api.serializers.fields import MAX_TIMESTAMP
from memory.models import Memory, content_hash, structured_attributes
from memory.transfer_format import FormatError, parse_json, read_lines

SCOPES = ("user_id", "agent_id", "app_id", "run_id")
# The entity types of a listing, and the scope each filters on.
ENTITY_SCOPES = {"user": "user_id", "agent": "agent_id", "app": "app_id", "run": "run_id"}
HISTORY_EVENTS = ("ADD", "UPDATE", "DELETE")
PAGE_SIZE = 200  # the Platform's largest page
OSS_LIMIT = 1000  # the open-source server lists at most this many memories per scope
# A file that is one JSON document is parsed whole (its memories' list can be anywhere in it):
# above this, JSON Lines, read a line at a time.
MAX_DOCUMENT_BYTES = 64 * 2**20
TIMEOUT = httpx.Timeout(60.0, connect=10.0)


class SourceError(Exception):
    """The source can't be read (unreachable, refused the key, or answered something that is
    not Mem0's shape); the message says which and where."""


@dataclass(frozen=True)
class SourceChange:
    """One row of a memory's history at the source."""

    id: str
    event: str  # ADD, UPDATE or DELETE
    old_memory: str | None
    new_memory: str | None
    created_at: datetime | None
    input: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class SourceMemory:
    id: str
    text: str
    scope: dict[str, str | None]
    metadata: dict[str, Any] = field(default_factory=dict)
    categories: list[str] = field(default_factory=list)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    expiration_date: date | None = None
    immutable: bool = False
    replaced_by: str | None = None
    role: str = ""
    actor_id: str = ""
    history: list[SourceChange] | None = None  # None: the source keeps none, or it was not read


class Source(Protocol):
    name: str

    def memories(self) -> Iterator[SourceMemory]:
        """Every memory, each once, superseded ones included where the source lists them."""
        ...

    def history(self, memory: SourceMemory) -> list[SourceChange] | None:
        """The memory's history, read from the source (None: it keeps none)."""
        ...


# -- one memory, checked -----------------------------------------------------------------------


def memory_of(item: Any, where: str) -> SourceMemory:
    """A Mem0 memory object (the Platform's get_all / export item, or the open-source server's)
    as a SourceMemory; SourceError names what is wrong."""
    if not isinstance(item, Mapping):
        raise SourceError(f"{where}: a memory must be a JSON object")
    ident = item.get("id")
    if not isinstance(ident, str | int) or isinstance(ident, bool) or str(ident) == "":
        raise SourceError(f"{where}: a memory needs its id")
    where = f"{where} (memory {ident})"
    text = item.get("memory", item.get("text", item.get("data")))
    if not isinstance(text, str) or not text.strip():
        raise SourceError(f"{where}: no text (memory)")
    scope: dict[str, str | None] = {}
    for name in SCOPES:
        value = item.get(name)
        if name == "run_id" and value is None:
            value = item.get("session_id")  # the Platform's name for it
        if value is not None and not isinstance(value, str | int):
            raise SourceError(f"{where}: {name} must be a string")
        scope[name] = (str(value).strip() or None) if value is not None else None
    metadata = item.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise SourceError(f"{where}: metadata must be an object")
    categories = item.get("categories") or []
    if not isinstance(categories, list) or not all(isinstance(c, str) for c in categories):
        raise SourceError(f"{where}: categories must be a list of strings")
    replaced_by = item.get("replaced_by")
    if replaced_by is not None and not isinstance(replaced_by, str):
        raise SourceError(f"{where}: replaced_by must be an id")
    history = item.get("history")
    return SourceMemory(
        id=str(ident),
        text=text,
        scope=scope,
        # The scope keys never live in engram's metadata, and actor_id and role (which the
        # open-source server leaves there) are fields of their own.
        metadata={k: v for k, v in metadata.items() if k not in (*SCOPES, "actor_id", "role")},
        categories=list(dict.fromkeys(categories)),
        created_at=moment(item.get("created_at"), where, "created_at"),
        updated_at=moment(item.get("updated_at"), where, "updated_at"),
        expiration_date=day(item.get("expiration_date"), where),
        immutable=item.get("immutable") is True,
        replaced_by=replaced_by or None,
        role=_text(item.get("role") or metadata.get("role")),
        actor_id=_text(item.get("actor_id") or metadata.get("actor_id")),
        history=changes_of(history, where) if isinstance(history, list) else None,
    )


def changes_of(rows: Any, where: str) -> list[SourceChange]:
    """A history answer (a list of rows) as SourceChanges, oldest first; rows of events engram
    has no word for are left out."""
    if isinstance(rows, Mapping) and isinstance(rows.get("results"), list):
        rows = rows["results"]
    if not isinstance(rows, list):
        raise SourceError(f"{where}: a history must be a list")
    changes = []
    for position, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise SourceError(f"{where}: history row {position} must be an object")
        event = str(row.get("event") or "").upper()
        if event not in HISTORY_EVENTS:
            continue
        ident = row.get("id")
        messages = row.get("input") or []
        changes.append(
            SourceChange(
                id=str(ident) if ident not in (None, "") else f"{position}",
                event=event,
                old_memory=_text_or_none(row.get("old_memory")),
                new_memory=_text_or_none(row.get("new_memory")),
                created_at=moment(row.get("created_at"), where, "history created_at"),
                input=[dict(m) for m in messages if isinstance(m, Mapping)]
                if isinstance(messages, list)
                else [],
            )
        )
    changes.sort(key=lambda c: c.created_at or datetime.min.replace(tzinfo=UTC))
    return changes


def moment(value: Any, where: str, name: str) -> datetime | None:
    """A time as Mem0 writes it: ISO 8601 (with Z or an offset; without one it is UTC) or Unix
    seconds."""
    if value in (None, ""):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        # The API's range for a timestamp (an add's `timestamp`).
        if not 0 <= value <= MAX_TIMESTAMP:
            raise SourceError(f"{where}: {name} {value!r} is not a time from 1970 to 9999")
        return datetime.fromtimestamp(value, tz=UTC)
    if not isinstance(value, str):
        raise SourceError(f"{where}: {name} must be a time")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SourceError(f"{where}: {name} {value[:40]!r} is not an ISO 8601 time") from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise SourceError(f"{where}: {name} {value!r} is outside years 1-9999 in UTC") from None


def day(value: Any, where: str) -> date | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise SourceError(f"{where}: expiration_date must be a date")
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        raise SourceError(f"{where}: expiration_date {value[:40]!r} is not a date") from None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# -- the sources -------------------------------------------------------------------------------


class _Http:
    """A JSON client for one server: every failure is a SourceError saying what and where."""

    def __init__(self, base_url: str, headers: dict[str, str], client: httpx.Client | None) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SourceError(f"{base_url!r} is not an http(s) URL")
        self.base = base_url.rstrip("/") + "/"
        self.client = client or httpx.Client(timeout=TIMEOUT, follow_redirects=False)
        self.headers = headers

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        url = urljoin(self.base, path.lstrip("/"))
        try:
            response = self.client.request(method, url, headers=self.headers, **kwargs)
        except httpx.HTTPError as error:
            raise SourceError(f"{method} {url}: {error}") from None
        if response.status_code in (401, 403):
            raise SourceError(
                f"{method} {url}: the source refused the key ({response.status_code})"
            )
        if response.status_code >= 400:
            raise SourceError(f"{method} {url}: HTTP {response.status_code} {_detail(response)}")
        try:
            return response.json()
        except ValueError:
            raise SourceError(f"{method} {url}: the answer is not JSON") from None


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, Mapping):
        return str(body.get("detail") or body.get("error") or body)[:200]
    return str(body)[:200]


class PlatformSource:
    """The Mem0 Platform's API, or any server that speaks it (engram's own included), by API
    key: the entities (users, agents, apps, runs), each one's memories page by page (superseded
    and expired ones too), and each memory's history."""

    def __init__(self, base_url: str, api_key: str, *, client: httpx.Client | None = None) -> None:
        self.name = f"Mem0 API at {base_url}"
        self.http = _Http(base_url, {"Authorization": f"Token {api_key}"}, client)

    def entities(self) -> Iterator[tuple[str, str]]:
        page: Any = self.http.call("GET", "v1/entities/")
        followed: set[str] = set()
        while True:
            rows = page.get("results") if isinstance(page, Mapping) else page
            if not isinstance(rows, list):
                raise SourceError("v1/entities/: not a list of entities")
            for row in rows:
                kind = row.get("type") if isinstance(row, Mapping) else None
                name = row.get("name", row.get("id")) if isinstance(row, Mapping) else None
                if kind in ENTITY_SCOPES and isinstance(name, str) and name:
                    yield ENTITY_SCOPES[kind], name
            following = page.get("next") if isinstance(page, Mapping) else None
            if not following:
                return
            url = _same_server(self.http.base, following)
            if url in followed:  # a source whose pages go round in a circle
                raise SourceError(f"v1/entities/: the next page {following!r} came before")
            followed.add(url)
            page = self.http.call("GET", url)

    def memories(self) -> Iterator[SourceMemory]:
        seen: set[str] = set()
        for scope, name in self.entities():
            number = 1
            while True:
                body = {"filters": {scope: name}, "show_expired": True, "latest_only": False}
                page = self.http.call(
                    "POST",
                    "v3/memories/",
                    params={"page": number, "page_size": PAGE_SIZE},
                    json=body,
                )
                rows = page.get("results") if isinstance(page, Mapping) else page
                if not isinstance(rows, list):
                    raise SourceError(f"v3/memories/ ({scope}={name}): not a list of memories")
                new = 0
                for item in rows:
                    memory = memory_of(item, f"{scope}={name} page {number}")
                    if memory.id not in seen:
                        seen.add(memory.id)
                        new += 1
                        yield memory
                # A page with nothing new ends the scope: a source that ignores `page` and
                # answers the same one again (with `next` set) cannot keep the command going.
                if not (isinstance(page, Mapping) and page.get("next")) or not new:
                    break
                number += 1

    def history(self, memory: SourceMemory) -> list[SourceChange] | None:
        path = f"v1/memories/{_segment(memory.id)}/history/"
        return changes_of(self.http.call("GET", path), f"history of {memory.id}")


class OssSource:
    """The Mem0 open-source server (server/main.py): its entities, each one's memories (at most
    OSS_LIMIT a scope: that server pages no further), and each memory's history."""

    def __init__(
        self, base_url: str, api_key: str | None = None, *, client: httpx.Client | None = None
    ) -> None:
        self.name = f"Mem0 open-source server at {base_url}"
        self.http = _Http(base_url, {"X-API-Key": api_key} if api_key else {}, client)
        self.capped: list[str] = []  # the scopes that hit OSS_LIMIT

    def memories(self) -> Iterator[SourceMemory]:
        rows = self.http.call("GET", "entities")
        if not isinstance(rows, list):
            raise SourceError("entities: not a list of entities")
        seen: set[str] = set()
        for row in rows:
            kind = row.get("type") if isinstance(row, Mapping) else None
            name = row.get("id") if isinstance(row, Mapping) else None
            if kind not in ENTITY_SCOPES or not isinstance(name, str) or not name:
                continue
            scope = ENTITY_SCOPES[kind]
            params: dict[str, Any] = {scope: name, "top_k": OSS_LIMIT, "show_expired": "true"}
            page = self.http.call("GET", "memories", params=params)
            items = page.get("results") if isinstance(page, Mapping) else page
            if not isinstance(items, list):
                raise SourceError(f"memories ({scope}={name}): not a list of memories")
            if len(items) >= OSS_LIMIT:
                self.capped.append(f"{scope}={name}")
            for item in items:
                memory = memory_of(item, f"{scope}={name}")
                if memory.id not in seen:
                    seen.add(memory.id)
                    yield memory

    def history(self, memory: SourceMemory) -> list[SourceChange] | None:
        path = f"memories/{_segment(memory.id)}/history"
        return changes_of(self.http.call("GET", path), f"history of {memory.id}")


class FileSource:
    """A Mem0 export file: the JSON of a Platform export or of get_all (a list of memories, or
    an object holding one under "results" or "memories"), or JSON Lines of memories. A memory
    may carry its history under "history"."""

    def __init__(self, path: Path) -> None:
        self.name = f"Mem0 export file {path}"
        self.path = path

    def memories(self) -> Iterator[SourceMemory]:
        seen: set[str] = set()
        for where, item in self._items():
            memory = memory_of(item, where)
            if memory.id not in seen:
                seen.add(memory.id)
                yield memory

    def history(self, memory: SourceMemory) -> list[SourceChange] | None:
        return memory.history

    def _items(self) -> Iterator[tuple[str, Any]]:
        document = self._document()
        if document is None:  # JSON Lines
            yield from self._lines()
            return
        items = _memory_list(document)
        if items is None:
            raise SourceError(
                f"{self.path}: no memories found (a list, or an object with "
                '"results" or "memories")'
            )
        for position, item in enumerate(items):
            yield f"{self.path} item {position}", item

    def _document(self) -> Any:
        """The file as one JSON document, or None: it is not one (JSON Lines), or it is larger
        than MAX_DOCUMENT_BYTES (read as JSON Lines, whose first line then says so)."""
        try:
            if self.path.stat().st_size > MAX_DOCUMENT_BYTES:
                return None
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise SourceError(f"{self.path}: {error}") from None
        try:
            return json.loads(text)
        except RecursionError:
            raise SourceError(f"{self.path}: nests deeper than {MAX_JSON_DEPTH} levels") from None
        except ValueError:
            return None

    def _lines(self) -> Iterator[tuple[str, Any]]:
        try:
            for number, line in read_lines(self.path):
                if line.strip():
                    yield f"{self.path} line {number}", parse_json(line, f"line {number}")
        except FormatError as error:
            larger = self.path.stat().st_size > MAX_DOCUMENT_BYTES
            note = (
                f" (a file of more than {MAX_DOCUMENT_BYTES} bytes is read as JSON Lines, one "
                "memory a line)"
                if larger
                else ""
            )
            raise SourceError(f"{self.path}: {error}{note}") from None


def _memory_list(document: Any) -> list[Any] | None:
    if isinstance(document, list):
        return document
    if isinstance(document, Mapping):
        for key in ("results", "memories", "data"):
            value = document.get(key)
            if isinstance(value, list):
                return value
            if isinstance(value, Mapping):  # an export's payload nested once more
                nested = _memory_list(value)
                if nested is not None:
                    return nested
    return None


def _segment(ident: str) -> str:
    """An id as one path segment."""
    return quote(ident, safe="")


def _same_server(base: str, following: str) -> str:
    """A `next` link, followed only on the server already being read (never elsewhere)."""
    absolute = urljoin(base, following)
    if urlsplit(absolute)[:2] != urlsplit(base)[:2]:
        raise SourceError(f"the source's next page {following!r} is on another server")
    return absolute


# -- as engram's project records ---------------------------------------------------------------

# Ids a source gives that are not UUIDs become these (the same every run: an import run again
# finds them), and the source's id is kept in the memory's metadata under MAPPED_ID_KEY.
ID_NAMESPACE = uuid.UUID("0f4d3c39-6f0e-4b53-9d1c-2f7c1a8e5b60")
MAPPED_ID_KEY = "mem0_id"
ACTOR = "command:import_mem0"


def engram_id(source_id: str) -> uuid.UUID:
    """The engram id of a source id: the same id when it is a UUID (Mem0's are)."""
    try:
        return uuid.UUID(source_id)
    except ValueError:
        return uuid.uuid5(ID_NAMESPACE, source_id)


def supersession_order(memories: list[SourceMemory]) -> list[SourceMemory]:
    """The memories in an order an import can write them in: each after the memory that
    replaced it (whose row its replaced_by points at), the current ones first."""
    by_id = {m.id: m for m in memories}

    def depth(memory: SourceMemory) -> int:
        seen = {memory.id}
        steps, at = 0, memory
        while at.replaced_by in by_id and at.replaced_by not in seen:
            at = by_id[at.replaced_by]
            seen.add(at.id)
            steps += 1
        return steps

    return sorted(memories, key=depth)


def memory_record(
    memory: SourceMemory, *, known: set[str], now: datetime, keep_source_id: bool = False
) -> dict[str, Any]:
    """The project-file record (memory.transfer_format) of a source memory. `known`: the source
    ids being imported, so a replaced_by naming any other memory is dropped (and the memory,
    whose replacement is not coming, stays current). The source's id goes in the metadata
    when the engram id will not be it (`keep_source_id`: the import maps every id). Its values
    are checked by the API's rules by the caller (import_project.check_record)."""
    metadata = dict(memory.metadata)
    if keep_source_id or engram_id(memory.id) != _uuid_or_none(memory.id):
        metadata[MAPPED_ID_KEY] = memory.id
    created = memory.created_at or now
    replaced_by = memory.replaced_by if memory.replaced_by in known else None
    return {
        "type": "memory",
        "id": str(engram_id(memory.id)),
        **memory.scope,
        "text": memory.text,
        "hash": content_hash(memory.text),
        "embedding": None,  # embedded here: the source's vectors are another model's
        "context_before": "",
        "context_after": "",
        "conversation_id": None,
        "seq": None,  # the next of this instance's sequence
        "metadata": metadata,
        "categories": memory.categories,
        "role": memory.role[:20],
        "actor_id": memory.actor_id,
        "created_at": created.isoformat(),
        "updated_at": (memory.updated_at or created).isoformat(),
        "expiration_date": memory.expiration_date.isoformat() if memory.expiration_date else None,
        "structured_attributes": structured_attributes(created),
        "state": Memory.State.SUPERSEDED if replaced_by else Memory.State.ACTIVE,
        "replaced_by": str(engram_id(replaced_by)) if replaced_by else None,
        "immutable": memory.immutable,
        "source_event_id": None,
        "source_positions": [],
    }


def history_records(memory: SourceMemory, *, now: datetime) -> list[dict[str, Any]]:
    """The history records of a source memory: its own rows where the source keeps them,
    otherwise one ADD row at its creation (every engram memory has one)."""
    ident = engram_id(memory.id)
    changes = memory.history or [
        SourceChange(
            id="ADD",
            event="ADD",
            old_memory=None,
            new_memory=memory.text,
            created_at=memory.created_at,
        )
    ]
    records: list[dict[str, Any]] = []
    for change in changes:
        row_id = _uuid_or_none(change.id) or uuid.uuid5(ID_NAMESPACE, f"{ident}:{change.id}")
        records.append(
            {
                "type": "history",
                "id": str(row_id),
                "memory_id": str(ident),
                **memory.scope,
                "event": change.event,
                "old_memory": change.old_memory,
                "new_memory": change.new_memory,
                "actor": ACTOR,
                "event_id": None,
                "input": [
                    {"role": str(m.get("role", "")), "content": str(m.get("content", ""))}
                    for m in change.input
                ],
                "metadata": {},
                "categories": memory.categories,
                "created_at": (change.created_at or memory.created_at or now).isoformat(),
            }
        )
    return records


def _uuid_or_none(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None
