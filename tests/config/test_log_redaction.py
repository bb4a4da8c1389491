"""No log holds an end-user dashboard token (tenants.links): gunicorn's access and error lines,
the application's log lines and the database access log, whatever path the request takes.

The token in /me/<token>/ is a credential. These requests reach engram behind a real gunicorn,
started with the project's config, and each would have logged it: the link without its trailing
slash (redirected before any view), with NUL in it (refused by a middleware), with a Host the
server does not serve (a security error, logged with the request), as a request line gunicorn
refuses (quoted in its warning), and under an API prefix (a database access-log row).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core import signing

from audit.models import AccessLog
from config.redaction import redact
from tenants import links
from tenants.db import project_context
from tests.config.test_gunicorn import exchange, gunicorn_server, http_request
from tests.factory import make_key


@pytest.fixture
def gunicorn_log(committed_db: None, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """gunicorn on a free port and the test database, its output (both logs) in a file."""
    log = tmp_path / "gunicorn.log"
    with gunicorn_server(log, ENGRAM_LOG_LEVEL="INFO", ENGRAM_LOG_FORMAT="json") as port:
        yield port, log


def wait_for(log: Path, needles: list[str]) -> str:
    """The log's text once it holds every needle (gunicorn writes its access line after the
    response), or after a generous deadline, for the assertions to report what is missing."""
    deadline = time.monotonic() + 30
    while True:
        text = log.read_text(errors="replace")
        if all(needle in text for needle in needles) or time.monotonic() > deadline:
            return text
        time.sleep(0.1)


def test_no_log_holds_a_dashboard_token(gunicorn_log: tuple[int, Path]) -> None:
    port, log = gunicorn_log
    token, _ = links.mint(make_key("acme", "main").key, "alice", 3600)
    answered = {
        f"/me/{token}": 301,  # APPEND_SLASH's redirect, before any view
        f"/me/{token}%00/": 400,  # SafeUrlMiddleware
        f"/me/{token}/": 200,
        f"/me/{token}/no/such/page/": 404,
        f"/v1/me/{token}/": 404,  # an unknown API path: kept in its access-log row
    }
    request_ids = []
    for path, expected in answered.items():
        status, headers, _ = exchange(port, http_request(path))
        assert status == expected, path
        request_ids.append(headers["x-request-id"])
    bad_host = http_request(f"/me/{token}/").replace(b"Host: 127.0.0.1", b"Host: evil.example")
    status, headers, _ = exchange(port, bad_host)  # DisallowedHost: logged with the request
    assert status == 400
    request_ids.append(headers["x-request-id"])
    bad_line = f"GET /me/{token}/\r\n\r\n".encode()  # no HTTP version: gunicorn quotes it
    assert exchange(port, bad_line)[0] == 400

    text = wait_for(log, [*request_ids, "Invalid request from"])
    lines = text.splitlines()
    for request_id in request_ids:  # each was logged, with the token replaced
        assert any(request_id in line and "/me/<redacted>" in line for line in lines), text
    assert "<WSGIRequest: GET '/me/<redacted>/'>" in text, text
    assert "Invalid HTTP request line: 'GET /me/<redacted>/'" in text, text
    signature = token.rsplit(":", 1)[1]
    assert token not in text and signature not in text
    with project_context(None):
        paths = list(AccessLog.objects.values_list("path", flat=True))
    assert "/v1/me/<redacted>/" in paths
    assert not [path for path in paths if signature in path]


def test_it_redacts_a_token_anywhere_but_not_a_user_named_me() -> None:
    token = signing.dumps({"u": "alice"}, salt=links.SALT, compress=True)
    lines = {
        f"Referer: https://example.com/engram/me/{token}/": "example.com/engram/me/<redacted>/",
        f'"GET /me/{token}x" 301': '"GET /me/<redacted>" 301',
        f"reverse with {{'token': '{token}'}}": "{'token': '<redacted>'}",
    }
    for line, redacted in lines.items():
        assert redacted in redact(line) and token[-43:] not in redact(line), line
    assert redact("POST /v1/users/me/dashboard-link/") == "POST /v1/users/me/dashboard-link/"
