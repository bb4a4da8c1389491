"""engram behind a real gunicorn, started with the project's config (config/gunicorn_conf.py).

What gunicorn itself answers (a request it refuses before the app sees it) must take the API's
JSON error shape too, and a chunked request body must reach the app.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from tests.factory import make_key

ROOT = Path(__file__).resolve().parents[2]
BODY_LIMIT = 4096


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read until gunicorn closes; (status, lower-cased headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(raw)
        data = b""
        while chunk := connection.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = unchunk(body)
    return int(status_line.split()[1]), headers, body


def unchunk(data: bytes) -> bytes:
    body = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return body
        body, data = body + data[:size], data[size + 2 :]


def http_request(path: str, *headers: str, body: bytes = b"", method: str = "GET") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def chunked(body: bytes, size: int = 1000) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


@pytest.fixture(
    scope="module",
    params=[("1", "0"), ("1", "10"), ("4", "10")],
    ids=["sync", "gthread-keepalive", "gthread-4-threads"],
)
def server(
    request: pytest.FixtureRequest,
    django_db_setup: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[int]:
    """gunicorn on a free loopback port and the test database: the sync worker (no
    keep-alive), one thread with keep-alive (the gthread worker), the default four threads."""
    threads, keepalive = request.param
    log = tmp_path_factory.mktemp("gunicorn") / "gunicorn.log"
    settings = {
        "ENGRAM_WEB_THREADS": threads,
        "ENGRAM_WEB_KEEPALIVE": keepalive,
        "ENGRAM_MAX_BODY_BYTES": str(BODY_LIMIT),
        "ENGRAM_LOG_LEVEL": "WARNING",
    }
    with gunicorn_server(log, **settings) as port:
        yield port


@contextlib.contextmanager
def gunicorn_server(log: Path, **settings: str) -> Iterator[int]:
    """gunicorn with the project's config on a free loopback port and the test database, one
    worker process, `settings` in its environment and its output in `log`; yields the port once
    it answers."""
    with gunicorn_process(log, **settings) as (port, _):
        yield port


@contextlib.contextmanager
def gunicorn_process(log: Path, **settings: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """gunicorn_server's server: its port, and its master process."""
    db = connections["default"].settings_dict
    url = f"postgresql://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    port = free_port()
    env = {**os.environ, "DATABASE_URL": url, "ENGRAM_WEB_WORKERS": "1", **settings}
    with log.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn_conf.py",
             "--bind", f"127.0.0.1:{port}"],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                exchange(port, http_request("/v1/ping/"))
                break
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield port, process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def json_error(reply: tuple[int, dict[str, str], bytes]) -> tuple[int, str]:
    status, headers, body = reply
    assert headers["content-type"] == "application/json", (status, headers, body)
    detail = json.loads(body)["detail"]
    assert isinstance(detail, str)
    assert detail
    return status, detail


def test_it_answers_an_overlong_request_line_with_json(server: int) -> None:
    status, detail = json_error(exchange(server, http_request("/v1/ping/?q=" + "a" * 5000)))
    assert status == 414
    assert "too large" in detail


def test_it_answers_a_malformed_header_with_json(server: int) -> None:
    status, _ = json_error(exchange(server, http_request("/v1/ping/", "No colon here")))
    assert status == 400


def test_it_answers_a_malformed_request_line_with_json(server: int) -> None:
    status, detail = json_error(exchange(server, b"NONSENSE\r\n\r\n"))
    assert status == 400
    assert detail.startswith("Bad Request")


def test_it_answers_too_many_headers_with_json(server: int) -> None:
    headers = [f"X-Filler-{i}: {i}" for i in range(150)]
    status, _ = json_error(exchange(server, http_request("/v1/ping/", *headers)))
    assert status == 431


def test_it_does_not_announce_a_server_version(server: int) -> None:
    for raw in (http_request("/v1/ping/"), http_request("/v1/ping/?q=" + "a" * 5000)):
        _, headers, _ = exchange(server, raw)
        assert "/" not in headers.get("server", ""), headers


def test_it_reads_a_chunked_body(committed_db: None, server: int) -> None:
    key = make_key("acme", "chunked")
    payload = {
        "messages": [{"role": "user", "content": "I drink green tea"}],
        "user_id": "alice",
        "infer": False,
    }
    raw = http_request(
        "/v3/memories/add/",
        f"Authorization: Token {key.raw}",
        "Content-Type: application/json",
        "Transfer-Encoding: chunked",
        method="POST",
        body=chunked(json.dumps(payload).encode(), size=10),
    )
    status, _, body = exchange(server, raw)
    assert status == 200, body
    result: Any = json.loads(body)
    assert [r["data"]["memory"] for r in result["results"]] == ["I drink green tea"]


def test_it_refuses_a_chunked_body_over_the_limit_with_json(server: int) -> None:
    raw = http_request(
        "/v1/ping/",
        "Content-Type: application/json",
        "Transfer-Encoding: chunked",
        method="POST",
        body=chunked(b"x" * (BODY_LIMIT * 3)),
    )
    status, detail = json_error(exchange(server, raw))
    assert status == 413
    assert f"limit of {BODY_LIMIT} bytes" in detail


def test_it_keeps_a_connection_alive_unless_keepalive_is_0(
    request: pytest.FixtureRequest, server: int
) -> None:
    """ENGRAM_WEB_KEEPALIVE > 0: a second request on the same connection is answered (the
    sync worker, keep-alive 0, closes the connection after its one answer)."""
    keepalive = request.node.callspec.params["server"][1] != "0"
    ping = b"GET /v1/ping/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    answers = 0
    with socket.create_connection(("127.0.0.1", server), timeout=10) as connection:
        for _ in range(2):
            try:
                connection.sendall(ping)
                data = b""
                while b"\r\n\r\n" not in data and (chunk := connection.recv(65536)):
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(body) < length and (chunk := connection.recv(65536)):
                    body += chunk
            except (OSError, StopIteration):
                break
            if not head.startswith(b"HTTP/1.1 401"):  # no key: the API's JSON 401
                break
            answers += 1
    assert answers == (2 if keepalive else 1)
