"""Traces across Ray shards: a child's spans continue its driver's trace, and reach the
driver's provider.

A shard has no exporter of its own (the engine's provider, with its exporters, lives in the
driver and does not travel). Its runtime gets a tracer over a private SDK provider whose one
processor turns each finished span into a `SpanRecord` and sends batches to the driver over
the shard's channel; the driver rebuilds them and hands them to its provider's processors.
A batch goes whenever a task's `invoke_agent` span ends, so a child's spans have reached the
driver before its outcome does (the shard waits until the driver has handled what it sent).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from subsessions._version import __version__
from subsessions.otel.tracing import PROPAGATOR, SCOPE, Traced, Tracer
from subsessions.otel.wire import SpanBatch, SpanRecord, TraceContext

log = logging.getLogger("subsessions")
FLUSH_AT = 64  # spans held at most before a batch goes anyway
_warned: set[str] = set()

Send = Callable[[SpanBatch], None]


class Forwarder(SpanProcessor):
    """The shard's span processor: finished spans, in batches, to the driver."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._held: list[SpanRecord] = []

    def on_start(self, span: Any, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        self._held.append(record(span))
        attributes = span.attributes or {}
        if len(self._held) >= FLUSH_AT or attributes.get(
                "gen_ai.operation.name") == "invoke_agent":
            self.flush()

    def flush(self) -> None:
        if self._held:
            batch, self._held = SpanBatch(tuple(self._held)), []
            self._send(batch)

    def shutdown(self) -> None:
        self.flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.flush()
        return True


@contextlib.contextmanager
def restored(runtime: Traced, send: Send, context: TraceContext) -> Iterator[None]:
    """The spawning span's context is current inside; the runtime traces from now on."""
    if runtime.tracer is None:
        provider = TracerProvider(shutdown_on_exit=False)
        provider.add_span_processor(Forwarder(send))
        runtime.tracer = Tracer.from_provider(provider, context.capture_content)
    token = otel_context.attach(PROPAGATOR.extract(dict(context.carrier)))
    try:
        yield
    finally:
        otel_context.detach(token)


def record(span: ReadableSpan) -> SpanRecord:
    own = span.context
    assert own is not None  # a span the SDK made has its context
    parent = span.parent
    status = span.status
    return SpanRecord(
        name=span.name, trace_id=own.trace_id, span_id=own.span_id,
        parent_id=None if parent is None else parent.span_id,
        trace_flags=int(own.trace_flags), kind=span.kind.value,
        start=span.start_time or 0, end=span.end_time or 0,
        attributes=dict(span.attributes or {}),
        status=(status.status_code.value, status.description),
    )


def readable(r: SpanRecord, resource: Resource | None) -> ReadableSpan:
    flags = TraceFlags(r.trace_flags)
    code, description = r.status
    status = StatusCode(code)
    return ReadableSpan(
        name=r.name,
        context=SpanContext(r.trace_id, r.span_id, is_remote=False, trace_flags=flags),
        parent=None if r.parent_id is None else SpanContext(
            r.trace_id, r.parent_id, is_remote=False, trace_flags=flags),
        resource=resource, attributes=r.attributes, kind=SpanKind(r.kind),
        status=Status(status, description if status is StatusCode.ERROR else None),
        start_time=r.start, end_time=r.end,
        instrumentation_scope=InstrumentationScope(SCOPE, __version__),
    )


def replay(tracer: Tracer, batch: SpanBatch) -> None:
    """Hand a shard's spans to the driver's provider's processors (an SDK provider's; with
    another kind of provider they are dropped, with one warning)."""
    provider = tracer.provider
    processor = getattr(provider, "_active_span_processor", None)
    if processor is None:
        if "replay" not in _warned:
            _warned.add("replay")
            log.warning("spans from Ray shards are dropped: the tracer provider %s is not "
                        "OpenTelemetry's SDK provider", type(provider).__name__)
        return
    resource = getattr(provider, "resource", None)
    for r in batch.records:
        processor.on_end(readable(r, resource))
