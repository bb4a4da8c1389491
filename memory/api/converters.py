"""The path converter of scope ids and entity names (registered as "scope" in urls.py).

An id is any text the API stores (memory.models.scope_id_error): "/", ".", "?", "#", "%",
spaces, line breaks and any Unicode included. A client sends it percent-encoded (%2F for "/"),
but the server decodes the path before Django sees it (PEP 3333 PATH_INFO, ASGI `path`), so the
segment may hold "/" and Django's `str` ([^/]+) cannot match it, nor `path` (.+, no line
breaks) every id. This converter matches any non-empty text; a route ending in fixed text
(`<scope:user_id>/dashboard-link/`) still resolves one way, the pattern being anchored at
the end. The view validates what it matched, so an id no memory can have is a 400 with a
`detail`, never a 404.
"""

from __future__ import annotations


class ScopeIdConverter:
    regex = r"[\s\S]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value
