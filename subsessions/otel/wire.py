"""What crosses to and from a Ray shard for traces: plain picklable values, no OpenTelemetry.

A child goes with the W3C `traceparent` of the span that spawned it; the spans its shard
finishes come back as records the driver rebuilds and hands to its own provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import frozen


@frozen
class TraceContext:
    """The spawning span's context (W3C trace context headers) and the content switch."""

    carrier: Mapping[str, str]
    capture_content: bool = False


@frozen
class SpanRecord:
    """One finished span, as the driver rebuilds it."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    trace_flags: int
    kind: int  # SpanKind's value
    start: int  # ns since the epoch
    end: int
    attributes: Mapping[str, Any]
    status: tuple[int, str | None]  # (StatusCode's value, description)


@frozen
class SpanBatch:
    """Spans a shard finished, for the driver's provider."""

    records: tuple[SpanRecord, ...]
