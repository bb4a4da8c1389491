"""The worker's metrics listener: `serve`, on ENGRAM_METRICS_BIND (host:port).

Forked by the Dramatiq master when the variable is set (config.worker.Metrics): it serves the
scrape of memory.exposition (every process of ENGRAM_METRICS_DIR, and the database's figures),
one request at a time, to a request that carries ENGRAM_METRICS_TOKEN when one is set. A worker
host needs no web server to be scraped. A listener that cannot bind logs why and stays idle, so
that the worker it came with keeps working (Dramatiq's master stops every process when one of
them exits).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

logger = logging.getLogger(__name__)


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        logger.debug(format, *args)


def address(bind: str) -> tuple[str, int]:
    """host:port ([v6]:port too) as a (host, port) pair."""
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"ENGRAM_METRICS_BIND={bind!r} must be host:port")
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 - the operator's choice


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    from django.db import close_old_connections
    from prometheus_client import CONTENT_TYPE_LATEST

    from memory import exposition

    if environ.get("PATH_INFO", "/") not in ("/", exposition.METRICS_PATH):
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"Not found: the metrics are at /metrics.\n"]
    if not exposition.authorized(environ.get("HTTP_AUTHORIZATION")):
        start_response(
            "401 Unauthorized",
            [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="metrics"')],
        )
        return [b"Metrics need the metrics token (Authorization: Bearer ...).\n"]
    close_old_connections()
    body = exposition.scrape()
    start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Cache-Control", "no-store")])
    return [body]


def serve() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.conf import settings

    bind = str(settings.ENGRAM_METRICS_BIND)
    try:
        server: WSGIServer = make_server(*address(bind), app, handler_class=_Quiet)
    except (OSError, ValueError) as exc:
        logger.error("metrics listener not started on %s: %s", bind, exc)
        threading.Event().wait()  # idle: the worker goes on (see the module docstring)
        return 1
    logger.info("metrics listener on %s", bind)
    server.serve_forever()
    return 0
