"""Multimodal content parts of an add request's messages (Mem0's `image_url`, `pdf_url`,
`txt_url`, `mdx_url`): their shapes, the URL rules, and the fetch allow-list.

A message's `content` may be one object instead of text:

    {"type": "image_url", "image_url": {"url": URL | "data:image/jpeg;base64,..."}}
    {"type": "pdf_url", "pdf_url": {"url": URL}}
    {"type": "txt_url" | "mdx_url", <type>: {"url": URL | bare base64 of UTF-8 text}}

Only the worker reads them (infer=true): text documents become the message's text (a URL
fetched by memory.extraction.documents, and only from a host in ENGRAM_FETCH_ALLOWED_HOSTS);
images and PDFs go to Claude as blocks, URLs as URLs (Claude fetches them, engram does not).
The same rules run on the request path (a 400) and again in the worker, which trusts nothing it
reads back. Pure: settings and the standard library only, so the API and the worker share it.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

IMAGE = "image_url"
PDF = "pdf_url"
DOCUMENTS = ("txt_url", "mdx_url")  # text: fetched or decoded, then read as the message's text
PART_TYPES = (IMAGE, PDF, *DOCUMENTS)
MAX_URL_CHARS = 2048
MAX_PARTS = 20  # content parts in one add request
# Claude's image media types, with the first bytes each format starts with.
IMAGE_MAGIC = {
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),  # then 4 bytes of length, then WEBP (checked below)
}
DATA_URI = re.compile(r"data:(?P<media>[a-z/]+);base64,(?P<data>.*)", re.DOTALL)
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")  # base64 has no ":", so this is a URL
LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
HOST_NAME = re.compile(rf"{LABEL}(?:\.{LABEL})*\.?")
# An ENGRAM_FETCH_ALLOWED_HOSTS entry (config.settings checks the same form at start-up).
HOST_ENTRY = re.compile(
    r"(?:\[(?P<ip6>[0-9a-f:.]+)\]|(?P<name>[^:\[\]]+))(?::(?P<port>[0-9]{1,5}))?"
)
DEFAULT_PORTS = {"http": 80, "https": 443}


class PartError(ValueError):
    """A content part that cannot be accepted (a 400 on the request path; in the worker, a
    permanent failure of the event)."""


@dataclass(frozen=True)
class Part:
    """One content part, checked. Either `url` (an http(s) URL) or `data` (base64: an image's,
    with its `media_type`, or a text document's UTF-8 bytes)."""

    type: str
    url: str = ""
    data: str = ""
    media_type: str = ""

    @property
    def is_document(self) -> bool:
        return self.type in DOCUMENTS

    @property
    def size(self) -> int:
        """Bytes of the base64 `data`, decoded (0 for a URL)."""
        return len(self.data) * 3 // 4 - self.data[-2:].count("=")

    def as_json(self) -> dict[str, Any]:
        """The request shape, as stored in the event's payload."""
        if self.url:
            value = self.url
        elif self.media_type:
            value = f"data:{self.media_type};base64,{self.data}"
        else:
            value = self.data
        return {"type": self.type, self.type: {"url": value}}

    def placeholder(self) -> str:
        """What stands for the part where only text goes (context, transcripts, summaries)."""
        kind = {IMAGE: "image", PDF: "pdf"}.get(self.type) or self.type[:3] + " document"
        if self.url:
            return f"[{kind}: {self.url}]"
        if self.media_type:
            return f"[{kind}: {self.media_type}, {self.size} bytes]"
        return f"[{kind}, {self.size} bytes]"


def parse_part(value: Any) -> Part:
    """A part from a message's `content` object, checked (no network, no allow-list)."""
    if not isinstance(value, dict):
        raise PartError("must be text or one content object.")
    kind = value.get("type")
    if kind not in PART_TYPES:
        raise PartError(f"unknown content type {kind!r}; allowed: {', '.join(PART_TYPES)}.")
    extra = set(value) - {"type", kind}
    if extra:
        raise PartError(f"unexpected key {sorted(extra)[0]!r} in a {kind} part.")
    inner = value.get(kind)
    keys = {"url", "detail"} if kind == IMAGE else {"url"}  # OpenAI's image `detail`: ignored
    if not isinstance(inner, dict) or not isinstance(inner.get("url"), str) or set(inner) - keys:
        raise PartError(f'a {kind} part is {{"type": "{kind}", "{kind}": {{"url": "..."}}}}.')
    given: str = inner["url"]
    if not given:
        raise PartError(f"{kind}.url is empty.")
    if kind == IMAGE and given[:5].lower() == "data:":
        media_type, data = image_data(given)
        return Part(kind, data=data, media_type=media_type)
    if kind in DOCUMENTS and not SCHEME.match(given):
        document_text(decode_base64(given, kind))  # UTF-8 text, within the limit
        return Part(kind, data=given)
    return Part(kind, url=check_url(given, kind))


def describe(content: Any) -> str:
    """The placeholder of a stored part, without checking it again (the text of earlier
    messages and of summaries: an old payload must not fail a new event)."""
    kind = content.get("type") if isinstance(content, dict) else None
    inner = content.get(kind) if isinstance(kind, str) else None
    value = inner.get("url") if isinstance(inner, dict) else None
    if kind not in PART_TYPES or not isinstance(value, str):
        return "[content part]"
    if value[:5].lower() == "data:":
        media_type = value[5:].split(";", 1)[0]
        return Part(kind, data=value.split(",", 1)[-1], media_type=media_type).placeholder()
    if SCHEME.match(value):
        return Part(kind, url=value).placeholder()
    return Part(kind, data=value).placeholder()


def check_url(url: str, kind: str) -> str:
    """An http(s) URL of printable ASCII, with a host name or IP and no user name or password.

    Strict, so that every parser (urllib here, httpx in the fetch) reads the same host.
    """
    if len(url) > MAX_URL_CHARS:
        raise PartError(f"{kind}.url is {len(url)} characters; the limit is {MAX_URL_CHARS}.")
    if any(not 0x21 <= ord(c) <= 0x7E for c in url) or "\\" in url:
        raise PartError(f"{kind}.url must be plain ASCII without spaces or backslashes.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise PartError(f"{kind}.url is not a valid URL.") from None
    if parts.scheme.lower() not in DEFAULT_PORTS:
        raise PartError(f"{kind}.url must be an http or https URL (not {parts.scheme or '?'}:).")
    if "@" in parts.netloc:
        raise PartError(f"{kind}.url must not carry a user name or password.")
    host = parts.hostname or ""
    if not host or port == 0 or not (HOST_NAME.fullmatch(host) or _is_ip(host)):
        raise PartError(f"{kind}.url needs a valid host name or IP address.")
    return url


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_and_port(url: str) -> tuple[str, int]:
    """The host (lower case, no trailing dot, IPv6 without brackets) and port a URL names."""
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".")
    return host, parts.port or DEFAULT_PORTS[parts.scheme.lower()]


def allowed_hosts() -> set[tuple[str, int | None]]:
    """ENGRAM_FETCH_ALLOWED_HOSTS as (host, port); a port of None means the scheme's default."""
    found: set[tuple[str, int | None]] = set()
    for entry in settings.ENGRAM_FETCH_ALLOWED_HOSTS:
        match = HOST_ENTRY.fullmatch(entry.lower())
        if match is not None:
            host = (match["ip6"] or match["name"]).rstrip(".")
            found.add((host, int(match["port"]) if match["port"] else None))
    return found


def may_fetch(url: str) -> bool:
    """Whether the operator allows engram to fetch this (checked) URL: its host and port are in
    ENGRAM_FETCH_ALLOWED_HOSTS, exactly (no wildcards; a name, not what it resolves to)."""
    host, port = host_and_port(url)
    default = DEFAULT_PORTS[urlsplit(url).scheme.lower()]
    allowed = allowed_hosts()
    return (host, port) in allowed or (port == default and (host, None) in allowed)


def refuse_fetch(url: str, kind: str) -> str:
    """Why a document URL may not be fetched (the 400's text, and the worker's error)."""
    host, port = host_and_port(url)
    listed = ", ".join(settings.ENGRAM_FETCH_ALLOWED_HOSTS) or "none: no document URL is fetched"
    return (
        f"{kind}.url: {host}:{port} is not an allowed host for fetching documents "
        f"(ENGRAM_FETCH_ALLOWED_HOSTS: {listed}); send the text itself, or base64 of it."
    )


def decode_base64(data: str, kind: str) -> bytes:
    """Strict base64 (standard alphabet, padded), at most ENGRAM_MAX_DOCUMENT_BYTES decoded."""
    limit = settings.ENGRAM_MAX_DOCUMENT_BYTES
    if len(data) * 3 // 4 > limit + 2:  # refuse before decoding
        raise PartError(f"{kind} is about {len(data) * 3 // 4} bytes; the limit is {limit}.")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise PartError(f"{kind}.url is neither an http(s) URL nor valid base64.") from None
    if len(raw) > limit:
        raise PartError(f"{kind} is {len(raw)} bytes; the limit is {limit}.")
    return raw


def document_text(raw: bytes, kind: str = "document") -> str:
    """A text document's bytes as text: UTF-8 (a BOM dropped), no NUL, not blank."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise PartError(f"{kind} is not UTF-8 text.") from None
    if "\x00" in text:
        raise PartError(f"{kind} contains a NUL character.")
    if not text.strip():
        raise PartError(f"{kind} is empty.")
    return text


def image_data(uri: str) -> tuple[str, str]:
    """(media type, base64) of a data: URI holding a JPEG, PNG, GIF or WebP image."""
    match = DATA_URI.fullmatch(uri)
    if match is None or match["media"] not in IMAGE_MAGIC:
        raise PartError(
            "image_url.url must be an http(s) URL or data:image/(jpeg|png|gif|webp);base64,..."
        )
    raw = decode_base64(match["data"], IMAGE)
    media_type = match["media"]
    if not raw.startswith(IMAGE_MAGIC[media_type]) or (
        media_type == "image/webp" and raw[8:12] != b"WEBP"
    ):
        raise PartError(f"image_url data is not a {media_type.removeprefix('image/')} image.")
    return media_type, match["data"]
