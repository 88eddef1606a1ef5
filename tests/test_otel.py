"""OpenTelemetry GenAI spans (DESIGN 3.12), read back from the SDK's in-memory exporter:
names, parents (across spawns, and across Ray shards), attributes, error types, content only
when asked for, and nothing of OpenTelemetry imported by an engine that does not trace."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from scripting import (
    FOREVER_MS,
    WORKER,
    Script,
    call,
    create,
    first_prompt,
    spawn_held,
    tokens,
    wait,
)

from subsessions import (
    Budget,
    ChildFailed,
    Engine,
    ModelError,
    ScriptedModel,
    SessionConfig,
    Tool,
)

pytest.importorskip("opentelemetry.sdk", reason="pip install 'subsessions[otel]'")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

NOOP = Tool("noop", "Does nothing.", handler=lambda arguments, invocation: "ok")
CONTENT = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
           "gen_ai.tool.call.arguments", "gen_ai.tool.call.result")


class Spans:
    """What a provider exported, with the questions the tests ask of it."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def all(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.all if s.name == name]

    def agent(self, session_id: str) -> ReadableSpan:
        (span,) = [s for s in self.named_like("invoke_agent")
                   if s.attributes and s.attributes["gen_ai.agent.id"] == session_id]
        return span

    def named_like(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.all if s.name.split(" ")[0] == prefix]

    def parent(self, span: ReadableSpan) -> ReadableSpan | None:
        if span.parent is None:
            return None
        (found,) = [s for s in self.all if s.context and s.context.span_id == span.parent.span_id]
        return found

    def children(self, span: ReadableSpan) -> list[ReadableSpan]:
        assert span.context is not None
        return [s for s in self.all if s.parent and s.parent.span_id == span.context.span_id]


@pytest.fixture
def spans() -> Spans:
    return Spans()


def attrs(span: ReadableSpan | None) -> dict[str, Any]:
    assert span is not None
    return dict(span.attributes or {})


def error_type(span: ReadableSpan) -> str | None:
    assert span.status.status_code in (StatusCode.ERROR, StatusCode.UNSET)
    value = attrs(span).get("error.type")
    assert (value is None) == (span.status.status_code is StatusCode.UNSET)
    return value


def family_script() -> Script:
    """A parent that starts two workers (`a`, `b`) and waits for both; `a` starts a
    grandchild and waits for it."""
    script = Script(route=first_prompt)
    script.play("parent task", [
        lambda outs: [create("worker", "a", call_id="call-a"),
                      create("worker", "b", call_id="call-b"), tokens(100, 10)],
        lambda outs: [wait(_id(outs, 0), call_id="wait-a"), wait(_id(outs, 1)), tokens(200, 20)],
    ])
    script.play("a", [
        lambda outs: [create("worker", "g", call_id="call-g"), tokens(30, 3)],
        lambda outs: [wait(_id(outs, 0)), tokens(40, 4)],
    ])
    script.handlers["b"] = lambda request: ["b says", tokens(5, 2)]
    script.handlers["g"] = lambda request: ["g says", tokens(7, 3)]
    return script


def _id(outs: Sequence[dict[str, Any]], n: int) -> str:
    import orjson

    return str(orjson.loads(outs[n]["output"])["session_id"])


async def test_a_run_with_two_children_and_a_grandchild_is_one_tree_of_genai_spans(
    home: Path, spans: Spans, backend: Any
) -> None:
    script = family_script()
    async with Engine(home, model_client=script.model, backend=backend,
                      tracer_provider=spans.provider) as engine:
        root = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        assert await root.send_and_wait("parent task") == "parent done"
        a, b = (script.seen["a"][0].session_id, script.seen["b"][0].session_id)
        g = script.seen["g"][0].session_id
    names = sorted(s.name for s in spans.all)
    assert names == sorted(
        ["invoke_agent"] + ["invoke_agent worker"] * 3 + ["execute_tool create_session"] * 3
        + ["execute_tool wait_session"] * 3 + ["chat scripted"] * (3 + 3 + 1 + 1))
    assert len({s.context.trace_id for s in spans.all if s.context}) == 1  # one trace
    top = spans.agent(root.session_id)
    assert spans.parent(top) is None
    assert attrs(top) == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.id": root.session_id,
        "gen_ai.conversation.id": root.session_id, "gen_ai.request.model": "scripted",
        "gen_ai.usage.input_tokens": attrs(top)["gen_ai.usage.input_tokens"],
        "gen_ai.usage.output_tokens": attrs(top)["gen_ai.usage.output_tokens"],
    }
    # Each child's invoke_agent span is a child of the create_session call that spawned it.
    for session_id, spawner, call_id in ((a, top, "call-a"), (b, top, "call-b"),
                                          (g, spans.agent(a), "call-g")):
        span = spans.agent(session_id)
        tool = spans.parent(span)
        assert tool is not None and tool.name == "execute_tool create_session"
        assert attrs(tool)["gen_ai.tool.call.id"] == call_id
        assert attrs(tool)["gen_ai.tool.name"] == "create_session"
        assert spans.parent(tool) is spawner
        assert attrs(span)["gen_ai.agent.name"] == "worker"
        assert attrs(span)["gen_ai.agent.id"] == attrs(span)["gen_ai.conversation.id"] == session_id
        assert attrs(span)["subsessions.parent.id"] == attrs(spawner)["gen_ai.agent.id"]
    # Usage: a task's tokens are the sum of its model calls'; each call reports its own.
    for span in spans.named_like("invoke_agent"):
        chats = [c for c in spans.children(span) if c.name == "chat scripted"]
        for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"):
            assert attrs(span)[key] == sum(attrs(c)[key] for c in chats) > 0
    (b_chat,) = [c for c in spans.children(spans.agent(b)) if c.name == "chat scripted"]
    assert attrs(b_chat) == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": engine.model_provider,
        "gen_ai.request.model": "scripted", "gen_ai.conversation.id": b,
        "gen_ai.usage.input_tokens": 5,
        "gen_ai.usage.output_tokens": 2, "gen_ai.response.finish_reasons": ("stop",)}
    first = min((c for c in spans.children(top) if c.name == "chat scripted"),
                key=lambda c: c.start_time or 0)
    assert attrs(first)["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert (attrs(first)["gen_ai.usage.input_tokens"],
            attrs(first)["gen_ai.usage.output_tokens"]) == (100, 10)
    (wait_a,) = [s for s in spans.named("execute_tool wait_session")
                 if attrs(s)["gen_ai.tool.call.id"] == "wait-a"]
    assert spans.parent(wait_a) is top
    assert all(s.status.status_code is StatusCode.UNSET for s in spans.all)
    assert not [k for s in spans.all for k in attrs(s) if k in CONTENT]  # no content


@pytest.mark.in_process("content is recorded by the same code on a shard")
async def test_prompts_and_outputs_are_recorded_only_with_capture_content(
    home: Path, spans: Spans
) -> None:
    script = family_script()
    async with Engine(home, model_client=script.model, tracer_provider=spans.provider,
                      capture_content=True) as engine:
        root = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        await root.send_and_wait("parent task")
        b = script.seen["b"][0].session_id
    top = attrs(spans.agent(root.session_id))
    assert top["gen_ai.input.messages"] == (
        '[{"role":"user","parts":[{"type":"text","content":"parent task"}]}]')
    assert top["gen_ai.output.messages"] == (
        '[{"role":"assistant","parts":[{"type":"text","content":"parent done"}]}]')
    (spawn_b,) = [s for s in spans.named("execute_tool create_session")
                  if attrs(s)["gen_ai.tool.call.id"] == "call-b"]
    assert '"prompt": "b"' in attrs(spawn_b)["gen_ai.tool.call.arguments"].replace('":"', '": "')
    assert b in attrs(spawn_b)["gen_ai.tool.call.result"]
    (b_chat,) = [c for c in spans.children(spans.agent(b)) if c.name == "chat scripted"]
    assert '"content":"b"' in attrs(b_chat)["gen_ai.input.messages"]
    assert '"content":"b says"' in attrs(b_chat)["gen_ai.output.messages"]
    assert "You are a worker." in attrs(b_chat)["gen_ai.system_instructions"]


@pytest.mark.in_process("the Ray run of the tree above covers the shards")
async def test_children_of_run_sessions_start_under_its_execute_tool_span(
    home: Path, spans: Spans
) -> None:
    script = Script(route=first_prompt)
    script.play("parent task", [lambda outs: [call("run_sessions", call_id="run", tasks=[
        {"session_type": "worker", "prompt": "one"}, {"session_type": "worker", "prompt": "two"},
    ], mode="parallel", timeout_ms=FOREVER_MS)]])
    async with Engine(home, model_client=script.model, tracer_provider=spans.provider) as engine:
        root = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        assert await root.send_and_wait("parent task") == "parent done"
    (run,) = spans.named("execute_tool run_sessions")
    assert attrs(run)["gen_ai.tool.call.id"] == "run"
    assert spans.parent(run) is spans.agent(root.session_id)
    workers = spans.named("invoke_agent worker")
    assert len(workers) == 2
    assert all(spans.parent(w) is run for w in workers)


# -- failures: status error with error.type -------------------------------------------------
async def test_a_failed_child_a_cancelled_one_and_a_budget_stop_have_their_error_types(
    home: Path, spans: Spans, backend: Any
) -> None:
    script = Script()

    def down(request: Any) -> Any:
        raise ModelError("the model is down")

    script.handlers["fails"] = down
    script.handlers["loops"] = lambda request: ["again", call("noop")]
    async with Engine(home, model_client=script.model, tracer_provider=spans.provider,
                      backend=backend) as engine:
        root = await engine.create_session(SessionConfig(custom_agents=(WORKER,), tools=(NOOP,)))
        manager = root.subsessions
        fails = await manager.spawn_child("worker", "fails")
        with pytest.raises(ChildFailed):
            await manager.wait_child(fails)
        held = await spawn_held(root, script, "held")
        assert await manager.cancel_child(held)
        loops = await manager.spawn_child("worker", "loops", budget=Budget(max_turns=2))
        with pytest.raises(ChildFailed, match="turns limit 2"):
            await manager.wait_child(loops)
    # (on a shard the driver's model fails the call there: a remote error, with its text)
    failed = spans.agent(fails)
    assert error_type(failed) == ("ModelError" if backend is None else "RemoteError")
    assert failed.status.description == "the model is down"
    (chat,) = spans.children(failed)
    assert error_type(chat) == error_type(failed)
    cancelled = spans.agent(held)
    assert error_type(cancelled) == "cancelled"
    (chat,) = spans.children(cancelled)
    assert error_type(chat) == "cancelled"  # its model call was in flight
    stopped = spans.agent(loops)
    assert error_type(stopped) == "budget_exhausted"
    assert stopped.status.description == "budget exhausted: turns limit 2 reached"
    assert [error_type(s) for s in spans.children(stopped)] == [None, None, None]


async def test_a_tool_that_fails_sets_its_span_to_error_and_the_task_goes_on(
    home: Path, spans: Spans
) -> None:
    script = Script()
    script.play("go", [lambda outs: [call("nope", call_id="c1")]])
    async with Engine(home, model_client=script.model, tracer_provider=spans.provider) as engine:
        root = await engine.create_session(SessionConfig())
        assert await root.send_and_wait("go") == "parent done"
    (tool,) = spans.named("execute_tool nope")
    assert error_type(tool) == "ToolNotSupported"
    assert attrs(tool)["gen_ai.tool.call.id"] == "c1"
    assert error_type(spans.agent(root.session_id)) is None


async def test_spans_a_model_client_makes_during_its_call_nest_under_the_chat_span(
    home: Path, spans: Spans
) -> None:
    """An instrumented HTTP or model client (OpenInference's, httpx's) starts its spans in the
    current context: the chat span is current while its call runs, so they nest under it."""
    client_tracer = spans.provider.get_tracer("an-instrumented-client")

    def answer(request: Any) -> list[Any]:
        client_tracer.start_span("POST /v1/chat/completions").end()
        return ["hello"]

    async with Engine(home, model_client=ScriptedModel(answer),
                      tracer_provider=spans.provider) as engine:
        root = await engine.create_session(SessionConfig())
        assert await root.send_and_wait("hi") == "hello"
    (post,) = spans.named("POST /v1/chat/completions")
    chat = spans.parent(post)
    assert chat is not None and chat.name.split(" ")[0] == "chat"
    assert spans.parent(chat) == spans.agent(root.session_id)


# -- no cost when unused, and the global provider ---------------------------------------------
def _run(code: str, tmp_path: Path) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(tmp_path)],
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parent)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


RUN_ONE = """
    import asyncio, sys
    from subsessions import Engine, SessionConfig
    from subsessions.testing import Script

    async def main():
        script = Script()
        async with Engine(sys.argv[1], model_client=script.model) as engine:
            session = await engine.create_session(SessionConfig())
            assert await session.send_and_wait("hi") == "answer to hi"
            print(engine.runtime.tracer is not None)
"""


def test_an_engine_without_a_tracer_provider_imports_nothing_of_opentelemetry(
    tmp_path: Path
) -> None:
    out = _run(RUN_ONE + """
    asyncio.run(main())
    print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
    """, tmp_path)
    assert out.splitlines() == ["False", "[]"]


def test_the_global_provider_is_used_when_set_and_ignored_when_not(tmp_path: Path) -> None:
    out = _run(RUN_ONE + """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    asyncio.run(main())  # imported, but no provider set: no tracer
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    asyncio.run(main())
    print(sorted(s.name for s in exporter.get_finished_spans()))
    """, tmp_path)
    assert out.splitlines() == ["False", "True", "['chat scripted', 'invoke_agent']"]


# -- across processes: what a shard sends back -------------------------------------------------
def test_a_shards_spans_continue_the_drivers_trace_and_reach_its_provider(spans: Spans) -> None:
    """What the Ray backend does around a remote child, without Ray: the spawning span's
    context goes with the child, the shard's tracer (made then, content switch included)
    sends its finished spans back, and the driver hands them to its provider whole."""
    from types import SimpleNamespace

    from subsessions.models.base import TokenUsage
    from subsessions.otel import SpanBatch, engine_tracer, replay, shard_trace

    driver = engine_tracer(spans.provider, capture_content=True)
    assert driver is not None
    with driver.otel.start_as_current_span("execute_tool create_session") as spawning:
        context = driver.carrier()
    shard = SimpleNamespace(tracer=None)
    sent: list[SpanBatch] = []
    with shard_trace(shard, sent.append, context):
        tracer = shard.tracer
        assert tracer is not None and tracer.capture_content
        host = SimpleNamespace(session_id="child", model="m", profile=WORKER, stop=None,
                               token_usage=TokenUsage(), runtime=SimpleNamespace(
                                   model_provider="p"))
        task = tracer.begin(host, "the prompt")
        host.token_usage = TokenUsage(12, 3)
        try:
            raise ModelError("down")
        except ModelError:
            task.end(host, {"type": "task_complete", "error": {"message": "down"}})
    assert [len(batch.records) for batch in sent] == [1]  # sent as its task's span ended
    replay(driver, sent[0])
    (child,) = spans.named("invoke_agent worker")
    assert child.parent is not None and child.context is not None
    assert child.parent.span_id == spawning.get_span_context().span_id
    assert child.context.trace_id == spawning.get_span_context().trace_id
    assert child.resource is spans.provider.resource
    assert error_type(child) == "ModelError" and child.status.description == "down"
    assert attrs(child) == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.id": "child",
        "gen_ai.conversation.id": "child", "gen_ai.request.model": "m",
        "gen_ai.agent.name": "worker", "error.type": "ModelError",
        "gen_ai.input.messages":
            '[{"role":"user","parts":[{"type":"text","content":"the prompt"}]}]',
        "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 3}


def test_a_worker_without_the_extra_runs_its_child_untraced_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from types import SimpleNamespace

    from subsessions.otel import TraceContext, shard_trace

    monkeypatch.setitem(sys.modules, "subsessions.otel.remote", None)  # cannot be imported
    monkeypatch.setattr("subsessions.otel._warned", [])
    shard = SimpleNamespace(tracer=None)
    for _ in range(2):
        with shard_trace(shard, print, TraceContext({"traceparent": "00-" + "1" * 32 + "-"
                                                     + "2" * 16 + "-01"})):
            pass
    assert shard.tracer is None
    assert [r.message for r in caplog.records].count(
        "spans of children on this Ray worker are not recorded: import of "
        "subsessions.otel.remote halted; None in sys.modules") == 1


@pytest.mark.in_process("the exporter runs in the driver either way")
async def test_a_collector_that_is_down_loses_the_spans_with_one_error_not_the_run(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Phoenix (or any collector) down: the batch processor's thread fails its export, logs
    it once, and the engine never waits for it."""
    import socket

    http = pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter",
                               reason="the OTLP exporter: pip install 'subsessions[phoenix]'")
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    with socket.socket() as refusing:  # bound, never listening: connections are refused
        refusing.bind(("127.0.0.1", 0))
        port = refusing.getsockname()[1]
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(http.OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=1),
            schedule_delay_millis=600_000))  # one batch: exported (and lost) at shutdown
        script = Script()
        try:
            async with Engine(home, model_client=script.model,
                              tracer_provider=provider) as engine:
                session = await engine.create_session(SessionConfig())
                for n in range(20):
                    assert await session.send_and_wait(f"hi {n}") == f"answer to hi {n}"
        finally:
            provider.shutdown()  # the last export fails at once: refused
    failures = [r for r in caplog.records if "Failed to export" in r.getMessage()]
    assert len(failures) == 1
