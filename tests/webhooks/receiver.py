"""A real HTTP receiver for webhook tests: http.server in a thread, on a loopback port.

`mode` says how it answers: "ok" (204), "error" (500), "slow" (answers after `delay`
seconds), "redirect" (302 to /elsewhere), "drip" (a 200 sent one byte every `delay` seconds,
so that no single read waits long). Every request is kept (path, headers, body), and
`verify` checks one the way a receiver should (docs/webhooks.md).
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    port: int = 0
    mode: str = "ok"
    delay: float = 0.0
    requests: list[Received] = field(default_factory=list)
    dripped: list[int] = field(default_factory=list)  # bytes of each drip sent before it ended

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"


def verify(received: Received, secret: str, tolerance: int = 300) -> bool:
    """The receiver's check: a fresh timestamp and the HMAC over "<t>.<raw body>"."""
    parts = dict(p.split("=", 1) for p in received.headers["Engram-Signature"].split(","))
    timestamp = int(parts["t"])
    if abs(time.time() - timestamp) > tolerance:
        return False
    signed = f"{timestamp}.".encode() + received.body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts["v1"])


@contextmanager
def receiving(mode: str = "ok", delay: float = 0.0) -> Iterator[Receiver]:
    receiver = Receiver(mode=mode, delay=delay)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            receiver.requests.append(Received(self.path, dict(self.headers.items()), body))
            if receiver.mode == "slow":
                time.sleep(receiver.delay)
            if receiver.mode == "drip":
                self.drip(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                return
            status = {"ok": 204, "error": 500, "slow": 200, "redirect": 302}[receiver.mode]
            self.send_response(status)
            if status == 302:
                self.send_header("Location", f"http://127.0.0.1:{receiver.port}/elsewhere")
            reply = b"" if status == 204 else b"x" * 5000
            if status != 204:
                self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            if reply:
                self.wfile.write(reply)

        def do_GET(self) -> None:  # a document server (memory.extraction.documents)
            if receiver.mode == "drip":
                self.drip(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nok")
                return
            self.send_response(404)
            self.end_headers()

        def drip(self, answer: bytes) -> None:
            self.close_connection = True
            sent = 0
            try:
                for byte in answer:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    sent += 1
                    time.sleep(receiver.delay)
            except OSError:  # the client hung up
                pass
            receiver.dripped.append(sent)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
