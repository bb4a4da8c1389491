"""gunicorn workers whose own error replies use the API's JSON error shape.

gunicorn refuses some requests before the app sees them (414 for an overlong request line,
431 for too many headers, 400 for a malformed request line or header...) and answers those
with a small HTML page. These workers keep gunicorn's handling (which status, its log lines)
and replace only the reply: `{"detail": "<reason>: <what gunicorn found>"}`.
"""

from __future__ import annotations

import json
from typing import Any

from gunicorn import util  # type: ignore[import-untyped]
from gunicorn.workers.gthread import ThreadWorker  # type: ignore[import-untyped]
from gunicorn.workers.sync import SyncWorker  # type: ignore[import-untyped]

DETAIL_CHARS = 300


class _CapturedReply:
    """Stands in for the client socket while gunicorn writes its HTML error reply."""

    def __init__(self) -> None:
        self.data = b""

    def gettimeout(self) -> float:
        return 0.0

    def sendall(self, data: bytes) -> None:
        self.data += data


def json_error_reply(html_reply: bytes, exc: BaseException) -> bytes:
    """The JSON reply for gunicorn's HTML one (same status line, `detail` body)."""
    status_line = html_reply.split(b"\r\n", 1)[0].decode("latin-1")
    _, status, reason = status_line.split(" ", 2)
    # A 5xx here is gunicorn's own failure; its exception is for the log, not the client.
    server_error = int(status) >= 500
    detail = "Internal server error." if server_error else f"{reason}: {exc}"[:DETAIL_CHARS]
    body = json.dumps({"detail": detail}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class JsonErrorsMixin:
    log: Any

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        captured = _CapturedReply()
        super().handle_error(req, captured, addr, exc)  # type: ignore[misc]
        if not captured.data:
            return
        try:
            util.write_nonblock(client, json_error_reply(captured.data, exc))
        except OSError:  # the client may be gone already
            self.log.debug("Failed to send error message.")


class JsonErrorSyncWorker(JsonErrorsMixin, SyncWorker):  # type: ignore[misc]
    pass


class JsonErrorThreadWorker(JsonErrorsMixin, ThreadWorker):  # type: ignore[misc]
    pass
