"""Outbound HTTP with one deadline for the whole exchange: connect, TLS, send, answer.

httpx's timeouts bound each step (a connect, one read, one write), not their sum: a receiver
that answers one byte every few seconds never trips a 10 s read timeout and holds the caller
for as long as it likes. `deadline_client(seconds)` gives a client whose network calls each
wait at most what is left of `seconds`, counted from the client's creation, and fail with
httpx's ReadTimeout (WriteTimeout, ConnectTimeout) once nothing is left. Make one client per
exchange: the deadline is the client's.

Used by the webhook deliveries (webhooks.delivery) and the document fetches of add requests
(memory.extraction.documents): the two requests engram makes to addresses a caller chose.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
import time
import typing
from collections.abc import Iterator

import httpcore
import httpx


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, clock: _Deadline) -> None:
        self._stream = stream
        self._clock = clock

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with self._clock.step(httpcore.ReadTimeout):
            return self._stream.read(max_bytes, self._clock.left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        with self._clock.step(httpcore.WriteTimeout):
            self._stream.write(buffer, self._clock.left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: typing.Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = self._clock.left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._stream.start_tls(ssl_context, server_hostname, left), self._clock
        )

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds

    def left(self, timeout: float | None, error: type[Exception]) -> float:
        """The step's own timeout, cut to what is left of the exchange's; `error` if none is."""
        remaining = self.ends - time.monotonic()
        if remaining <= 0:
            raise error(self.message)
        return remaining if timeout is None else min(timeout, remaining)

    @property
    def message(self) -> str:
        return f"the exchange took over its deadline of {self.seconds:g} s"

    @contextlib.contextmanager
    def step(self, error: type[Exception]) -> Iterator[None]:
        """A step that timed out because the exchange's deadline passed says so."""
        try:
            yield
        except httpcore.TimeoutException:
            if time.monotonic() >= self.ends:
                raise error(self.message) from None
            raise


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, clock: _Deadline) -> None:
        self._backend = httpcore.SyncBackend()
        self._clock = clock

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = self._clock.left(timeout, httpcore.ConnectTimeout)
        stream = self._backend.connect_tcp(host, port, left, local_address, socket_options)
        return _DeadlineStream(stream, self._clock)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:  # pragma: no cover - engram connects over TCP only
        left = self._clock.left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_unix_socket(path, left), self._clock)

    def sleep(self, seconds: float) -> None:  # pragma: no cover - no retries are configured
        self._backend.sleep(seconds)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """The verifying TLS context every deadline client shares, built once per process: loading
    the CA bundle costs about 8 ms a time, which a search's reranker call would otherwise pay
    twice (bench/rerank.py). An SSLContext is safe to share between threads."""
    return httpx.create_ssl_context(trust_env=False)


class _DeadlineTransport(httpx.HTTPTransport):
    """httpx's own transport (TLS verified, HTTP/1.1, no retries) on the deadline's backend."""

    def __init__(self, clock: _Deadline) -> None:
        super().__init__(verify=_ssl_context(), trust_env=False)
        # httpx builds its pool without a way to name the network backend; the same pool,
        # with ours (httpx is pinned: tests/config/test_outbound.py holds this to a receiver).
        self._pool = httpcore.ConnectionPool(
            ssl_context=_ssl_context(),
            max_connections=1,
            network_backend=_DeadlineBackend(clock),
        )


def deadline_client(seconds: float) -> httpx.Client:
    """An httpx client for one exchange that ends within `seconds`: no redirect followed, no
    proxy or certificate settings from the environment."""
    clock = _Deadline(seconds)
    return httpx.Client(
        transport=_DeadlineTransport(clock),
        timeout=seconds,
        follow_redirects=False,
        trust_env=False,
    )
