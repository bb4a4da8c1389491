"""OpenTelemetry traces, opt-in (issue #51, part 3): off unless OpenTelemetry's own variables ask.

`start(service)` is called once per serving process, after it forked (gunicorn's
post_worker_init, each Dramatiq worker process: the exporter's thread must be the process's
own). It turns tracing on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
is set (and OTEL_SDK_DISABLED is not true), with the official SDK's batch processor and OTLP
HTTP exporter; everything else comes from the standard variables the SDK reads itself
(OTEL_SERVICE_NAME — default engram-web / engram-worker —, OTEL_RESOURCE_ATTRIBUTES,
OTEL_EXPORTER_OTLP_HEADERS, OTEL_TRACES_SAMPLER, OTEL_BSP_*). Off, `span` costs one check.

The spans: one per web request (memory.exposition.MetricsMiddleware), with children for the
search's ranking statement, the query embedding, the graph reads of a search, each model call
and each webhook delivery; a worker message's span is a child of (and links to) the span that
sent it — the request that queued an add's extraction — through the message's `traceparent`
option (W3C trace context). Attributes are bounded names and numbers: routes, statuses,
strategies, counts, providers, outcomes — never a memory's text, a user id or a project.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from config.env import env_bool, env_optional

_tracer: trace.Tracer | None = None
_propagator = TraceContextTextMapPropagator()
Attributes = Mapping[str, str | int | float | bool]


def wanted() -> bool:
    """Whether OpenTelemetry's variables ask for traces (an OTLP endpoint, the SDK enabled)."""
    endpoint = env_optional("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env_optional(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return bool(endpoint) and not env_bool("OTEL_SDK_DISABLED", False)


def start(service: str, exporter: Any = None) -> bool:
    """Turn tracing on in this process when wanted() (or with `exporter`, a test's: spans are
    then exported one by one, at once). Returns whether it is on."""
    global _tracer  # noqa: PLW0603 - one tracer per process, set at its start
    if exporter is None and not wanted():
        return False
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    name = env_optional("OTEL_SERVICE_NAME") or service
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    _tracer = provider.get_tracer("engram")
    return True


def stop() -> None:
    """Tracing off in this process (tests)."""
    global _tracer  # noqa: PLW0603
    _tracer = None


def on() -> bool:
    return _tracer is not None


@contextmanager
def span(
    name: str,
    attributes: Attributes | None = None,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    parent: Mapping[str, str] | None = None,
) -> Iterator[Span | None]:
    """A span named `name` around the block, a child of the current one (or of `parent`, a
    carrier with a `traceparent`: an HTTP client's); an exception marks it failed and goes
    on. Yields None when tracing is off."""
    if _tracer is None:
        yield None
        return
    context = _propagator.extract(dict(parent)) if parent else None
    with _tracer.start_as_current_span(
        name, context=context, kind=kind, attributes=dict(attributes or {}),
        record_exception=False, set_status_on_exception=False,
    ) as current:  # fmt: skip
        try:
            yield current
        except BaseException as exc:
            failed(current, exc)
            raise


def failed(current: Span | None, exc: BaseException) -> None:
    """Mark a span failed with the exception's type (never its message: it may quote values)."""
    if current is not None:
        current.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        current.set_attribute("error.type", type(exc).__name__)


class Consumed:
    """A worker message's span, begun before it runs and ended after (Dramatiq's hooks): a
    child of the span that sent it (its `traceparent`), linked to it as well."""

    def __init__(
        self, tracer: trace.Tracer, name: str, sent: Mapping[str, str], attributes: Attributes
    ) -> None:
        parent = _propagator.extract(dict(sent)) if sent else None
        remote = trace.get_current_span(parent).get_span_context() if parent else None
        links = [Link(remote)] if remote is not None and remote.is_valid else []
        self.span = tracer.start_span(
            name, context=parent, kind=SpanKind.CONSUMER, attributes=dict(attributes),
            links=links, record_exception=False, set_status_on_exception=False,
        )  # fmt: skip
        self.token = otel_context.attach(trace.set_span_in_context(self.span))

    def end(self, exc: BaseException | None) -> None:
        if exc is not None:
            failed(self.span, exc)
        otel_context.detach(self.token)
        self.span.end()


def consumed(name: str, sent: Mapping[str, str], attributes: Attributes) -> Consumed | None:
    """Begin a worker message's span (None when tracing is off)."""
    return Consumed(_tracer, name, sent, attributes) if _tracer is not None else None


def carrier() -> dict[str, str]:
    """The current span's W3C trace context (`traceparent`), for a message to carry; empty
    when tracing is off or no span is current."""
    if _tracer is None:
        return {}
    found: dict[str, str] = {}
    _propagator.inject(found, otel_context.get_current())
    return found
