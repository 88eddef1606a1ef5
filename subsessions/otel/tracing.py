"""The spans of sessions, after OpenTelemetry's GenAI semantic conventions.

`invoke_agent {session_type}` per task, `chat {model}` per model call and `execute_tool
{name}` per tool call. Each is the current span while it runs, so a child's task (which
copies the context of the tool call that spawned it) starts its `invoke_agent` span under
that call's `execute_tool` span: parentage follows spawning without being passed around.
Imported only when an engine traces (the `[otel]` extra is installed then).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Mapping
from contextvars import Token
from typing import Any, Protocol

from attrs import define
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from subsessions._version import __version__
from subsessions.errors import BudgetExhausted
from subsessions.items import Item
from subsessions.models.base import ModelRequest, ModelResponse, TokenUsage
from subsessions.otel import content
from subsessions.otel.wire import TraceContext
from subsessions.profiles import Profile

SCOPE = "subsessions"
CANCELLED = "cancelled"
BUDGET = "budget_exhausted"
PROPAGATOR = TraceContextTextMapPropagator()  # W3C, whatever the global propagator is
TOOL_CALLS, STOP = ("tool_calls",), ("stop",)  # gen_ai.response.finish_reasons


class ModelRuntime(Protocol):
    @property
    def model_provider(self) -> str: ...


class Agent(Protocol):
    """What the spans read of a session."""

    @property
    def session_id(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def token_usage(self) -> TokenUsage: ...
    @property
    def profile(self) -> Profile | None: ...
    @property
    def runtime(self) -> ModelRuntime: ...
    @property
    def stop(self) -> object: ...  # the first stop asked of its task: a budget's, or a cancel


class Traced(Protocol):
    """A runtime, which carries its engine's tracer (a shard's gets one when asked)."""

    tracer: Tracer | None


@define(eq=False)
class Tracer:
    """The engine's tracer (`Runtime.tracer`): makes the spans, and knows its provider so
    spans finished on Ray shards can be handed to the provider's processors."""

    otel: trace.Tracer
    provider: Any
    capture_content: bool = False

    @classmethod
    def from_provider(cls, provider: Any, capture_content: bool) -> Tracer:
        return cls(provider.get_tracer(SCOPE, __version__), provider, capture_content)

    # -- invoke_agent: one task ---------------------------------------------------------------
    def begin(self, host: Agent, prompt: str) -> TaskSpan:
        """A task begins: its span is the current one until `TaskSpan.end`."""
        profile = host.profile
        name = profile.name if profile is not None else None
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.id": host.session_id,
            "gen_ai.conversation.id": host.session_id,
            "gen_ai.request.model": host.model,
        }
        if name is not None:
            attributes["gen_ai.agent.name"] = name
        parent = getattr(host, "parent", None)  # (no protocol of the core's names it)
        if parent is not None:
            attributes["subsessions.parent.id"] = parent.session_id
        if self.capture_content:
            attributes["gen_ai.input.messages"] = content.text_messages("user", prompt)
        span = self.otel.start_span(f"invoke_agent {name}" if name else "invoke_agent",
                                    kind=SpanKind.INTERNAL, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span))
        return TaskSpan(self, span, token, host.token_usage)

    # -- chat: one model call -------------------------------------------------------------------
    async def chat(self, host: Agent, request: ModelRequest,
                   work: Awaitable[ModelResponse]) -> ModelResponse:
        """Await a model call (`work`) inside its `chat {model}` span."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": host.runtime.model_provider,
            "gen_ai.request.model": request.model,
            "gen_ai.conversation.id": request.session_id,  # (conditionally required)
        }
        if self.capture_content:
            attributes["gen_ai.input.messages"] = content.item_messages(request.items)
            if request.instructions:
                attributes["gen_ai.system_instructions"] = content.instructions(
                    request.instructions)
        span = self.otel.start_span(f"chat {request.model}", kind=SpanKind.CLIENT,
                                    attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span))  # (what it calls nests)
        try:
            response = await work
            span.set_attributes(self._answered(request, response))
        except BaseException as exc:
            _failed(span, error_type(host, exc), exc)
            raise
        finally:
            otel_context.detach(token)
            span.end()
        return response

    def _answered(self, request: ModelRequest, response: ModelResponse) -> dict[str, Any]:
        usage = response.usage
        reasons = STOP
        for item in response.output:
            if isinstance(item, dict) and item.get("type") == "function_call":
                reasons = TOOL_CALLS
                break
        answered: dict[str, Any] = {
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.response.finish_reasons": reasons,
        }
        if response.model is not None and response.model != request.model:  # a fallback's
            answered["gen_ai.response.model"] = response.model
        if self.capture_content:
            answered["gen_ai.output.messages"] = content.item_messages(response.output)
        return answered

    # -- execute_tool: one tool call ----------------------------------------------------------
    async def tool(self, host: Agent, call: Item, work: Awaitable[str]) -> str:
        """Await a tool call (`work`) inside its `execute_tool {name}` span; children it
        spawns start under this span."""
        name = str(call.get("name", ""))
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": str(call.get("call_id", "")),
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": host.session_id,
        }
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = str(call.get("arguments", ""))
        span = self.otel.start_span(f"execute_tool {name}", kind=SpanKind.INTERNAL,
                                    attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span))  # what it spawns nests
        try:
            result = await work
            if self.capture_content:
                span.set_attribute("gen_ai.tool.call.result", result)
        except BaseException as exc:
            _failed(span, error_type(host, exc), exc)
            raise
        finally:
            otel_context.detach(token)
            span.end()
        return result

    # -- across processes -----------------------------------------------------------------------
    def carrier(self) -> TraceContext:
        """The current span's context, for a child spawned in another process."""
        headers: dict[str, str] = {}
        PROPAGATOR.inject(headers)
        return TraceContext(headers, self.capture_content)


@define(eq=False)
class TaskSpan:
    """A task's `invoke_agent` span, from `Tracer.begin` to `end`."""

    _tracer: Tracer
    _span: Span
    _token: Token[Context]
    _usage: TokenUsage  # the session's counts when the task began

    def end(self, host: Agent, terminal: Mapping[str, Any]) -> None:
        """The task's terminal record is written (called in the task's `finally`, where the
        exception that ends it, if any, is the one being raised)."""
        span = self._span
        used, before = host.token_usage, self._usage
        done: dict[str, Any] = {
            "gen_ai.usage.input_tokens": used.input_tokens - before.input_tokens,
            "gen_ai.usage.output_tokens": used.output_tokens - before.output_tokens}
        reason = terminal.get("reason")
        failed: tuple[str, str] | None = None
        if reason == "budget_limited":
            failed = BUDGET, str(terminal.get("message", ""))
        elif terminal.get("type") == "turn_aborted":
            failed = CANCELLED if "cancelled_by" in terminal else "interrupted", ""
        elif terminal.get("error") is not None:
            raised = sys.exc_info()[1]
            kind = type(raised).__qualname__ if isinstance(raised, Exception) else "error"
            failed = kind, str(terminal["error"].get("message", ""))
        elif self._tracer.capture_content:
            done["gen_ai.output.messages"] = content.text_messages(
                "assistant", terminal.get("last_agent_message"))
        if failed is not None:  # (the exception that ends the task, if any, is being raised)
            kind, text = failed
            span.set_status(_status(kind, sys.exc_info()[1], text))
            done["error.type"] = kind
        span.set_attributes(done)  # (one call: the SDK cleans a mapping at a time)
        otel_context.detach(self._token)
        span.end()


def error_type(host: Agent, exc: BaseException) -> str:
    """`error.type`: a cancel and a budget stop by name, else the exception's class."""
    if isinstance(exc, BudgetExhausted):
        return BUDGET
    if isinstance(exc, asyncio.CancelledError):
        return BUDGET if isinstance(host.stop, BudgetExhausted) else CANCELLED
    return type(exc).__qualname__


def _failed(span: Span, kind: str, exc: BaseException | None, text: str = "") -> None:
    span.set_status(_status(kind, exc, text))
    span.set_attribute("error.type", kind)


def _status(kind: str, exc: BaseException | None, text: str) -> Status:
    description = text or (str(exc) if isinstance(exc, Exception) else "") or kind
    return Status(StatusCode.ERROR, description)
