"""OpenTelemetry GenAI traces of sessions (the `[otel]` extra).

This module is what the core imports, and it imports no OpenTelemetry: an engine without a
tracer provider (none passed, none set globally) gets no tracer, and every call site in the
core is one `if tracer is None` away from costing nothing. With one, `tracing.Tracer` makes
the spans (`invoke_agent`, `chat`, `execute_tool`); `remote` carries them across Ray shards.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from subsessions.otel.wire import SpanBatch, TraceContext

if TYPE_CHECKING:
    from subsessions.otel.tracing import Traced, Tracer

__all__ = ["SpanBatch", "TraceContext", "engine_tracer", "replay", "shard_trace"]

log = logging.getLogger("subsessions")
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"  # the GenAI convention's
_warned: list[bool] = []  # the missing extra on a worker is told once


def engine_tracer(provider: Any = None, capture_content: bool | None = None) -> Tracer | None:
    """The engine's tracer: from `provider`, else from the global provider if one was set,
    else None. The global one is looked at only if OpenTelemetry is imported already (a
    program that set a provider has imported it), so an unused extra is never imported."""
    if provider is None:
        api = sys.modules.get("opentelemetry.trace")
        if api is None:
            return None
        provider = api.get_tracer_provider()
        if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
            return None
    if capture_content is None:
        capture_content = os.environ.get(CAPTURE_ENV, "").strip().lower() == "true"
    from subsessions.otel.tracing import Tracer

    return Tracer.from_provider(provider, capture_content)


@contextlib.contextmanager
def shard_trace(runtime: Traced, send: Callable[[SpanBatch], None],
                context: TraceContext | None) -> Iterator[None]:
    """On a Ray shard, around spawning a child's task: the driver's span that spawned it
    becomes the current context (so the task copies it), and the shard's runtime gets a
    tracer whose finished spans go to the driver through `send`."""
    if context is None:
        yield
        return
    try:
        from subsessions.otel.remote import restored
    except ImportError as exc:  # a worker without the [otel] extra: its child runs untraced
        if not _warned:
            _warned.append(True)
            log.warning("spans of children on this Ray worker are not recorded: %s", exc)
        yield
        return
    with restored(runtime, send, context):
        yield


def replay(tracer: Tracer | None, batch: SpanBatch) -> None:
    """In the driver: spans a shard finished go to the engine's provider's processors."""
    if tracer is not None:
        from subsessions.otel.remote import replay as replay_batch

        replay_batch(tracer, batch)
