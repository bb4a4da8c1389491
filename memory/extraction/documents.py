"""Text documents of an add request (`txt_url`, `mdx_url` parts), read in the worker.

A document becomes its message's text before extraction: base64 is decoded, a URL fetched. A
fetch is the one request engram makes on a caller's behalf, so it is fenced (no server-side
request forgery): only hosts the operator lists in ENGRAM_FETCH_ALLOWED_HOSTS (checked again
here: the setting may have changed since the request, and on the URL exactly as httpx will
send it), no redirects, no proxy from the environment, ENGRAM_FETCH_TIMEOUT for the whole
exchange (connect, status, headers and body: config.outbound), at most
ENGRAM_MAX_DOCUMENT_BYTES for the request's documents together (counted while reading, after
decompression), `text/*` only, UTF-8.

A document that cannot be had on a retry either (a 4xx, a redirect, too big, not text, not
UTF-8, a host no longer allowed) raises DocumentError, a ValueError: the pipeline fails the event
at once. A timeout, a refused connection, a 5xx, 408 or 429 raises DocumentUnavailableError: the
event is retried with backoff, until ENGRAM_EVENT_MAX_ATTEMPTS.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import httpx
from django.conf import settings

from config.outbound import deadline_client
from memory.extraction.llm.types import Context, Turn
from memory.parts import PartError, decode_base64, document_text, host_and_port, may_fetch

RETRYABLE_STATUS = frozenset({408, 429})
CHUNK = 64 * 1024


class DocumentError(ValueError):
    """A document that cannot be read, now or on a retry: the event fails."""


class DocumentUnavailableError(RuntimeError):
    """A document that could not be fetched this time (timeout, connection, 5xx): retried."""


def read_documents(context: Context, before_fetch: Callable[[], None] = lambda: None) -> Context:
    """The context with each new text-document message replaced by the document's text.

    `before_fetch` runs before each download (the worker renews its lease there).
    """
    budget = settings.ENGRAM_MAX_DOCUMENT_BYTES
    turns: list[Turn] = []
    for turn in context.new_messages:
        part = turn.part
        if part is None or not part.is_document:
            turns.append(turn)
            continue
        where = f"message {turn.position} ({part.type})"
        try:
            if part.url:
                before_fetch()
                raw = fetch(part.url, budget)
            else:
                raw = decode_base64(part.data, part.type)
            if len(raw) > budget:
                raise PartError(
                    "the request's documents exceed ENGRAM_MAX_DOCUMENT_BYTES "
                    f"({settings.ENGRAM_MAX_DOCUMENT_BYTES}) together"
                )
            budget -= len(raw)
            text = document_text(raw, part.type)
        except PartError as exc:
            raise DocumentError(f"{where}: {exc}") from None
        except DocumentUnavailableError as exc:
            raise DocumentUnavailableError(f"{where}: {exc}") from None
        turns.append(Turn(turn.position, turn.role, text))
    return dataclasses.replace(context, new_messages=turns)


def fetch(url: str, limit: int) -> bytes:
    """GET a document from an allowed host: at most `limit` bytes of `text/*`, no redirects."""
    if not may_fetch(url):
        raise PartError(f"{url}: the host is not in ENGRAM_FETCH_ALLOWED_HOSTS")
    headers = {"Accept": "text/plain, text/markdown, text/*;q=0.9", "User-Agent": "engram"}
    with deadline_client(settings.ENGRAM_FETCH_TIMEOUT) as client:
        request = client.build_request("GET", url, headers=headers)
        # The host httpx will connect to must be the one the allow-list matched.
        if (request.url.host.rstrip("."), request.url.port or _default(request.url)) != (
            host_and_port(url)
        ):
            raise PartError(f"{url}: the URL's host is ambiguous")
        try:
            response = client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise DocumentUnavailableError(f"{url}: {type(exc).__name__}: {exc}") from None
        try:
            return _body(url, response, limit)
        except httpx.HTTPError as exc:
            raise DocumentUnavailableError(f"{url}: {type(exc).__name__}: {exc}") from None
        finally:
            response.close()


def _over(limit: int) -> str:
    total = settings.ENGRAM_MAX_DOCUMENT_BYTES
    if limit == total:
        return f"over ENGRAM_MAX_DOCUMENT_BYTES ({total})"
    return f"over the {limit} bytes the request's earlier documents left of {total}"


def _default(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80


def _body(url: str, response: httpx.Response, limit: int) -> bytes:
    status = response.status_code
    if status >= 500 or status in RETRYABLE_STATUS:
        raise DocumentUnavailableError(f"{url}: the server answered {status}")
    if 300 <= status < 400:
        raise PartError(f"{url}: the server answered {status}, a redirect (not followed)")
    if status != 200:
        raise PartError(f"{url}: the server answered {status} {response.reason_phrase}".rstrip())
    media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if not media_type.startswith("text/"):
        raise PartError(f"{url}: the content type is {media_type or 'missing'}, not text/*")
    charset = response.charset_encoding
    if charset and charset.lower().replace("_", "-") not in ("utf-8", "utf8", "us-ascii", "ascii"):
        raise PartError(f"{url}: the charset is {charset}; only UTF-8 is read")
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PartError(f"{url}: the document is {declared} bytes, {_over(limit)}")
    body = bytearray()
    for chunk in response.iter_bytes(CHUNK):
        body += chunk
        if len(body) > limit:
            raise PartError(f"{url}: the document is longer, {_over(limit)}")
    return bytes(body)
