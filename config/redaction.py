"""Keep end-user dashboard tokens (tenants.links) out of every log.

The token in /me/<token>/ is a credential, and anything that logs a path or a URL can capture
it: gunicorn's access line (the path, for every answer: the redirect that adds a missing slash,
a refusal of NUL in the path, a 404), its error log (a request line it refuses is quoted), the
application's log lines (an error names the path; a security error carries the request). So
every line is redacted as it is written, whatever produced it: by RedactingStreamHandler for the
application's log (config/settings.py LOGGING), by config.gunicorn_logging.RedactingLogger for
gunicorn's (config/gunicorn_conf.py); the database access log redacts its path column with
`redact` too (audit.access). Two patterns, so that a token is caught however a line prints it:

- a path that starts with /me/ (at the start of the text, or after a blank, quote or `=`, as
  a line prints a path): its next segment, up to a /, blank, quote, `?` or `#`;
- any value shaped like one django.core.signing signed with a timestamp (payload:time:signature,
  the signature 43 URL-safe base64 characters), wherever it appears (under a script prefix, in
  a full URL, after other characters); a longer signature loses its first 43 characters.

The end-user views also rewrite the request's path (memory/web/enduser.py), so the access-log
middleware and Django's request logging see the redacted form there already.

Standard library only: gunicorn's master process imports this before Django is set up.
"""

from __future__ import annotations

import logging
import re

REDACTED = "<redacted>"
# Anchored where a path starts, so that an API path naming a user "me" keeps its next segment
# (/v1/users/me/dashboard-link/); a token elsewhere is the signed pattern's.
_ME_SEGMENT = re.compile(r"(?<![^\s\"'=])(/me/)[^/\s\"'?#]+")
# Starts only where a run of the token's characters starts, so a long run is scanned once.
_SIGNED = re.compile(r"(?<![\w.-])[\w.-]+:[0-9A-Za-z]+:[\w-]{43}", re.ASCII)
_PAGE_TOKEN = re.compile(r"(?<=/me/)[^/]+")


def redact(text: str) -> str:
    """`text` with every dashboard token (a /me/ path's segment, a signed value) replaced."""
    if "/me/" in text:
        text = _ME_SEGMENT.sub(rf"\1{REDACTED}", text)
    if ":" in text:
        text = _SIGNED.sub(REDACTED, text)
    return text


def redact_page_path(path: str) -> str:
    """The path of an end-user page (under any script prefix) with its token replaced, whatever
    the segment holds: in a path, blanks and quotes are the client's, part of the segment."""
    return _PAGE_TOKEN.sub(REDACTED, path, count=1)


class RedactingFormatter(logging.Formatter):
    """Another formatter's lines, redacted (for handlers configured by someone else)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record))


class RedactingStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """logging.StreamHandler whose every line, as formatted (message, extra fields, traceback),
    is redacted."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))
