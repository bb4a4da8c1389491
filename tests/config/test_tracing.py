"""OpenTelemetry traces (issue #51, part 3; config/tracing.py): off unless asked; a span per
request with children for the query embedding, the search statement, the graph reads and each
model call; the worker's span a child of (and linked to) the request that queued its message;
no memory text, user id or project in any attribute. In process through the SDK's in-memory
exporter; then a real gunicorn and a real Dramatiq worker export through the real OTLP HTTP
exporter to a local receiver, decoded with OpenTelemetry's own protobuf messages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from datetime import date
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from config import tracing
from memory import jobs
from memory.extraction.llm.claude import ClaudeExtractor
from memory.extraction.llm.types import Context, Turn
from tests.base import BaseTestCase
from tests.config.test_gunicorn import gunicorn_process
from tests.factory import auth, make_key
from tests.fake_anthropic import FakeClaude, Reply
from tests.local_server import serving
from tests.memory.test_events import database_url, stop, wait_for

ROOT = Path(__file__).resolve().parents[2]
CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"  # a client's traceparent
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.start("engram-test", exporter=exporter)
    yield exporter
    tracing.stop()


def named(found: tuple[ReadableSpan, ...] | list[ReadableSpan], name: str) -> ReadableSpan:
    matches = [s for s in found if s.name == name]
    assert len(matches) == 1, [s.name for s in found]
    return matches[0]


def every_attribute(found: tuple[ReadableSpan, ...]) -> str:
    return " ".join(f"{k}={v!s}" for s in found for k, v in (s.attributes or {}).items())


def test_tracing_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert not tracing.wanted() and not tracing.start("engram-test") and not tracing.on()
    with tracing.span("nothing") as span:
        assert span is None
    assert tracing.carrier() == {}
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert tracing.wanted()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not tracing.wanted()


class RequestSpansTest(BaseTestCase):
    exporter: InMemorySpanExporter

    @pytest.fixture(autouse=True)
    def _spans(self, spans: InMemorySpanExporter) -> None:
        self.exporter = spans

    def test_a_search_request_and_its_children(self) -> None:
        self.call(
            "post",
            "/v1/memories/",
            {"messages": "I grow tomatoes in Lyon", "user_id": "user-q7", "infer": False},
        )
        self.exporter.clear()
        found = self.client.post(
            "/v2/memories/search/",
            {"query": "tomatoes", "filters": {"user_id": "user-q7"}, "enable_graph": True},
            content_type="application/json",
            headers={**auth(self.alice.raw), "traceparent": CALLER},
        )
        assert found.status_code == 200, found.content
        done = self.exporter.get_finished_spans()
        request = named(done, "POST v2/memories/search/")
        assert request.kind.name == "SERVER"
        assert request.context.trace_id == int(CALLER_TRACE, 16)  # the caller's trace, continued
        attributes = request.attributes or {}
        assert attributes["http.route"] == "v2/memories/search/"
        assert attributes["http.response.status_code"] == 200
        for child in ("embed.query", "search.statement", "search.graph"):
            span = named(done, child)
            assert span.parent is not None and span.context.trace_id == request.context.trace_id
        assert (named(done, "search.statement").attributes or {})["engram.strategy"] == "exact"
        text = every_attribute(done)
        project = self.alice.key.project
        for secret in ("user-q7", "tomatoes", "Lyon", str(project.pk), project.name):
            assert secret not in text, secret


def test_a_message_sent_within_a_span_carries_its_context(spans: InMemorySpanExporter) -> None:
    with tracing.span("POST v1/memories/") as current:
        sent = jobs.PROCESS_EVENT.message("event", "project")
    assert current is not None
    context = current.get_span_context()
    flags = f"{int(context.trace_flags):02x}"
    assert sent.options == {
        "traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags}"
    }
    assert jobs.PROCESS_EVENT.message("event", "project").options == {}  # no span: none


def test_a_model_call_has_its_span(spans: InMemorySpanExporter, fake_claude: FakeClaude) -> None:
    fake_claude.script(Reply({"facts": [{"text": "User moved to Lyon", "positions": [0]}]}))
    model = ClaudeExtractor(
        api_key="sk-test", base_url=fake_claude.url, model="claude-haiku-5-5", max_tokens=512,
        timeout=5, max_retries=0,
    )  # fmt: skip
    context = Context(
        new_messages=[Turn(0, "user", "I moved to Lyon")], observed_on=date(2026, 12, 4)
    )
    model.extract(context)
    call = named(spans.get_finished_spans(), "model.call")
    assert call.kind.name == "CLIENT"
    assert dict(call.attributes or {}) == {
        "engram.provider": "claude",
        "engram.step": "record_facts",
        "engram.model": "claude-haiku-5-5",
        "engram.input_tokens": 120,
        "engram.output_tokens": 40,
        "engram.outcome": "ok",
    }


class Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: every span it is sent, decoded."""

    received: ClassVar[list[dict[str, Any]]] = []
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        with self.lock:
            for resource in export.resource_spans:
                service = next(
                    a.value.string_value
                    for a in resource.resource.attributes
                    if a.key == "service.name"
                )
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        self.received.append({"service": service, "span": span})
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_live_server_and_worker_export_over_otlp(committed_db: None, tmp_path: Path) -> None:
    Receiver.received.clear()
    with serving(Receiver) as receiver:
        otel = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver}",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        env = {**os.environ, "DATABASE_URL": database_url(), "ENGRAM_LOG_LEVEL": "WARNING", **otel}
        env.pop("ANTHROPIC_API_KEY", None)
        worker = subprocess.Popen(
            [sys.executable, "-m", "dramatiq", "config.worker", "--processes", "1",
             "--threads", "1", "--queues", "events"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            start_new_session=True, text=True,
        )  # fmt: skip
        try:
            key = make_key("acme", "traces").raw
            with gunicorn_process(tmp_path / "gunicorn.log", **otel) as (port, _):
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/v1/memories/",
                    data=b'{"messages": "I play chess on Sundays", "user_id": "user-x9"}',
                    headers={
                        **auth(key),
                        "Content-Type": "application/json",
                        "traceparent": CALLER,
                    },
                )
                with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
                    assert answer.status == 200

                def seen() -> list[dict[str, Any]]:
                    with Receiver.lock:
                        return [
                            r for r in Receiver.received if r["span"].trace_id.hex() == CALLER_TRACE
                        ]

                def both() -> bool:
                    names = {(r["service"], r["span"].name) for r in seen()}
                    return {
                        ("engram-web", "POST v1/memories/"),
                        ("engram-worker", "process_event"),
                    } <= names

                assert wait_for(both, seconds=60), [(r["service"], r["span"].name) for r in seen()]
        finally:
            stop(worker, signal.SIGTERM)
    found = seen()
    web = next(r["span"] for r in found if r["span"].name == "POST v1/memories/")
    consumer = next(r["span"] for r in found if r["span"].name == "process_event")
    assert consumer.parent_span_id == web.span_id  # queued by that request
    assert [link.span_id for link in consumer.links] == [web.span_id]
    assert any(r["span"].name == "embed.texts" and r["service"] == "engram-worker" for r in found)
    text = " ".join(str(a.value) for r in found for a in r["span"].attributes)
    for secret in ("user-x9", "chess", "Sundays"):
        assert secret not in text, secret
