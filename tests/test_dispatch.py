"""Host-side dispatch (DESIGN 3.6, 3.7): children reach the top-level session's handlers.

Every session's model is scripted and routed by its prompt (the first user
message). Children are held "running" by events the test sets, never by sleeping.
What is asserted is what a host notices: which handler ran with what, the
outputs the models are shown, the events on the streams, the engine's maps.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest
from scripting import FOREVER_MS, call, first_prompt, outputs

from subsessions import (
    ChildFailed,
    ChildStatus,
    Engine,
    Hooks,
    Invocation,
    ModelRequest,
    ModelResponse,
    Profile,
    ScriptedModel,
    Session,
    SessionConfig,
    Tool,
    ToolNotSupported,
    UnknownSession,
)
from subsessions._core.dispatch import SubagentInstance
from subsessions.events import SessionEvent
from subsessions.ids import new_session_id

NO_APPROVAL = "denied-no-approval-rule-and-could-not-request-from-user"
EMPTY = "EMPTY-NAME"  # a call the client renames to "" (ScriptedModel refuses empty names)
PARAMS = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}
HELPER = Profile(name="helper", developer_instructions="HELPER", tools=["save_result"])


# Why some tests run in process only (tests/conftest.py `in_process`):
GRAND = "it looks at a grandchild's Session, which lives on its parent's shard on Ray"
TOP = "no child: nothing runs on a shard"


def not_supported(name: str) -> str:
    return f"Tool '{name}' is not supported by this client instance."


# -- helpers ------------------------------------------------------------------------------
def spawned(request: ModelRequest) -> str:
    """The session id the last create_session call returned."""
    last = outputs(request)[-1]
    assert last["success"] is True, last
    return str(orjson.loads(last["output"])["session_id"])


def wait_for(request: ModelRequest) -> list[dict[str, Any]]:
    return [call("wait_session", session_id=spawned(request), timeout_ms=FOREVER_MS)]


Step = list[Any] | BaseException | Callable[[ModelRequest], Any]


class Model:
    """The model of every session in a test, routed by the session's prompt.

    `play(prompt, *steps)`: the n-th model call of a session with that prompt is
    answered by step n (a list of items, or a function of the request, sync or
    async); after the last step it answers `done {prompt}`.
    """

    def __init__(self) -> None:
        self.client = ScriptedModel(self._respond)
        self.plays: dict[str, tuple[Step, ...]] = {}
        self.requests: defaultdict[str, list[ModelRequest]] = defaultdict(list)
        self._reached: dict[str, asyncio.Event] = {}

    def play(self, prompt: str, *steps: Step) -> None:
        self.plays[prompt] = steps

    def hold(self, prompt: str, *after: Step) -> asyncio.Event:
        """The first model call of `prompt` waits until the returned event is set."""
        release = asyncio.Event()

        async def held(request: ModelRequest) -> list[Any]:
            await release.wait()
            return ["released"]

        self.play(prompt, held, *after)
        return release

    def _event(self, prompt: str) -> asyncio.Event:
        return self._reached.setdefault(prompt, asyncio.Event())

    async def reached(self, prompt: str) -> None:
        """Until a session with this prompt has called its model."""
        await asyncio.wait_for(self._event(prompt).wait(), 10)

    def last(self, prompt: str) -> ModelRequest:
        return self.requests[prompt][-1]

    def last_output(self, prompt: str) -> dict[str, Any]:
        return outputs(self.last(prompt))[-1]

    async def _respond(self, request: ModelRequest) -> Any:
        prompt = first_prompt(request)
        seen = self.requests[prompt]
        seen.append(request)
        self._event(prompt).set()
        turn = sum(1 for r in seen if r.session_id == request.session_id) - 1
        steps = self.plays.get(prompt, ())
        if turn >= len(steps):
            return [f"done {prompt}"]
        step = steps[turn]
        if callable(step):
            step = step(request)
            if inspect.isawaitable(step):
                step = await step
        return step


class Client:
    """Delegates to the scripted model, then renames calls named EMPTY to ""."""

    provider = "scripted"

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner

    async def respond(self, request: ModelRequest) -> ModelResponse:
        response = await self.inner.respond(request)
        output = tuple(
            {**item, "name": ""} if item.get("name") == EMPTY else item for item in response.output
        )
        return attrs.evolve(response, output=output)


class Handlers:
    """Tools whose handlers record each call as (tool, arguments, invocation)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], Invocation]] = []

    def tool(self, name: str, **kw: Any) -> Tool:
        def handler(arguments: dict[str, Any], invocation: Invocation) -> str:
            self.calls.append((name, arguments, invocation))
            return f"{name} ran"

        return Tool(name=name, description=f"The {name} tool.", parameters=PARAMS,
                    handler=handler, **kw)

    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]


def collect(session: Session) -> list[SessionEvent]:
    """Every event delivered to `session` through `on`, in order."""
    seen: list[SessionEvent] = []
    session.on(seen.append)
    return seen


def of_type(events: list[SessionEvent], kind: str) -> list[SessionEvent]:
    return [e for e in events if e.type == kind]


class Stream:
    """Iterates `session.event_stream()` in a task and keeps what arrives."""

    def __init__(self, session: Session) -> None:
        self.events: list[SessionEvent] = []
        self._waiters: list[tuple[Callable[[SessionEvent], bool], asyncio.Future[Any]]] = []
        self.task = asyncio.create_task(self._run(session))

    async def _run(self, session: Session) -> None:
        async for event in session.event_stream():
            self.events.append(event)
            for wanted, future in self._waiters:
                if not future.done() and wanted(event):
                    future.set_result(event)

    async def first(self, kind: str) -> SessionEvent:
        for event in self.events:
            if event.type == kind:
                return event
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((lambda e: e.type == kind, future))
        return await asyncio.wait_for(future, 10)


@pytest.fixture
async def stream_of() -> AsyncIterator[Callable[[Session], Any]]:
    made: list[Stream] = []

    async def start(session: Session) -> Stream:
        stream = Stream(session)
        made.append(stream)
        await asyncio.sleep(0)  # one loop pass: the stream's task subscribes
        return stream

    yield start
    for stream in made:
        stream.task.cancel()
    if made:
        await asyncio.wait([s.task for s in made])


@pytest.fixture
def model() -> Model:
    return Model()


@pytest.fixture
def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
async def engine(home: Path, model: Model, backend: Any) -> AsyncIterator[Engine]:
    async with Engine(home, model_client=Client(model.client), backend=backend) as engine:
        yield engine


async def root(engine: Engine, *tools: Tool, **config: Any) -> Session:
    config.setdefault("custom_agents", (HELPER,))
    return await engine.create_session(SessionConfig(tools=tools, **config))


def session_of(parent: Session, session_id: str) -> Session:
    return next(s for s in parent.subsessions.tree() if s.session_id == session_id)


# -- resolve_session ----------------------------------------------------------------------
@pytest.mark.in_process(TOP)
async def test_resolve_a_registered_session_is_itself(engine: Engine) -> None:
    parent = await root(engine)
    found, is_child = engine.resolve_session(parent.session_id)
    assert found is parent
    assert is_child is False


async def test_resolve_a_child_is_its_top_level_session(engine: Engine, model: Model) -> None:
    parent = await root(engine)
    release = model.hold("work")
    cid = await parent.subsessions.spawn_child("helper", "work")
    found, is_child = engine.resolve_session(cid)
    assert found is parent
    assert is_child is True
    release.set()
    await parent.subsessions.wait_child(cid)


async def test_resolve_a_grandchild_is_the_top_level_session(
    engine: Engine, model: Model
) -> None:
    parent = await root(engine, custom_agents=(Profile(name="nester"),))
    model.hold("level 1")
    model.hold("level 2")
    cid = await parent.subsessions.spawn_child("nester", "level 1")
    await model.reached("level 1")
    gcid = await session_of(parent, cid).subsessions.spawn_child("nester", "level 2")
    found, is_child = engine.resolve_session(gcid)
    assert found is parent
    assert is_child is True


@pytest.mark.in_process(TOP)
async def test_resolve_an_unknown_session_fails_with_its_id(engine: Engine) -> None:
    await root(engine)
    stranger = new_session_id()
    with pytest.raises(UnknownSession) as caught:
        engine.resolve_session(stranger)
    assert str(caught.value) == f"unknown session {stranger}"


async def test_resolve_an_orphaned_child_names_its_missing_parent(engine: Engine) -> None:
    await root(engine)
    orphan, gone = new_session_id(), new_session_id()
    engine.dispatcher.child_to_parent[orphan] = gone
    with pytest.raises(UnknownSession) as caught:
        engine.resolve_session(orphan)
    assert str(caught.value) == f"parent session {gone} for child {orphan} not found"


async def test_after_its_parent_is_destroyed_a_child_is_unknown(
    engine: Engine, model: Model
) -> None:
    parent = await root(engine)
    model.hold("work")
    cid = await parent.subsessions.spawn_child("helper", "work")
    await engine.destroy_session(parent.session_id)
    with pytest.raises(UnknownSession) as caught:
        engine.resolve_session(cid)
    assert str(caught.value) == f"unknown session {cid}"
    with pytest.raises(UnknownSession):  # the old object runs nothing more: a resume may
        await parent.send_and_wait("again")  # write its rollout without a second writer


# -- allowlists -----------------------------------------------------------------------------
async def test_allowlist_none_lets_a_child_call_every_parent_tool(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    agent = Profile(name="any", developer_instructions="ANY")
    parent = await root(engine, handlers.tool("alpha"), handlers.tool("beta"),
                        custom_agents=(agent,))
    model.play("work", [call("alpha", text="1"), call("beta", text="2")])
    cid = await parent.subsessions.spawn_child("any", "work")
    assert await parent.subsessions.wait_child(cid) == "done work"
    assert sorted(handlers.names()) == ["alpha", "beta"]
    assert [o["success"] for o in outputs(model.last("work"))] == [True, True]


async def test_allowlist_refuses_a_parent_tool_not_on_the_list(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    agent = Profile(name="picky", tools=["alpha"])
    parent = await root(engine, handlers.tool("alpha"), handlers.tool("beta"),
                        custom_agents=(agent,))
    model.play("work", [call("beta", call_id="call_beta", text="x")])
    cid = await parent.subsessions.spawn_child("picky", "work")
    await parent.subsessions.wait_child(cid)
    assert model.last_output("work") == {
        "type": "function_call_output", "call_id": "call_beta",
        "output": not_supported("beta"), "success": False,
    }
    assert handlers.calls == []


async def test_allowlist_list_still_runs_the_listed_tool(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    agent = Profile(name="picky", tools=["alpha"])
    parent = await root(engine, handlers.tool("alpha"), handlers.tool("beta"),
                        custom_agents=(agent,))
    model.play("work", [call("alpha", text="x")])
    cid = await parent.subsessions.spawn_child("picky", "work")
    await parent.subsessions.wait_child(cid)
    assert model.last_output("work")["output"] == "alpha ran"
    assert handlers.names() == ["alpha"]


async def test_empty_allowlist_offers_nothing_and_refuses_every_tool(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    agent = Profile(name="bare", tools=[])
    parent = await root(engine, handlers.tool("alpha"), custom_agents=(agent,))
    model.play("work", [call("alpha", text="x"),
                        call("create_session", session_type="bare", prompt="more")])
    cid = await parent.subsessions.spawn_child("bare", "work")
    await parent.subsessions.wait_child(cid)
    assert model.requests["work"][0].tools == ()
    assert [o["output"] for o in outputs(model.last("work"))] == [
        not_supported("alpha"), not_supported("create_session"),
    ]
    assert handlers.calls == []
    assert parent.subsessions.tree() == [session_of(parent, cid)]  # nothing was spawned


async def test_the_dispatcher_refuses_a_tool_off_the_list_even_when_the_child_holds_it(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    """The host-side gate itself (DESIGN 3.6). A child's router holds only what its allowlist
    admits, so the tool is handed to the dispatcher here, as any path that held it would."""
    alpha, beta = handlers.tool("alpha"), handlers.tool("beta")
    picky = Profile(name="picky", tools=["alpha"])
    parent = await root(engine, alpha, beta, custom_agents=(picky,))
    release = model.hold("work")
    cid = await parent.subsessions.spawn_child("picky", "work")
    await model.reached("work")
    child, dispatcher = session_of(parent, cid), engine.dispatcher
    with pytest.raises(ToolNotSupported) as caught:
        await dispatcher.call_tool(child, beta, "beta", {"text": "x"}, "call_beta")
    assert str(caught.value) == not_supported("beta")
    assert handlers.calls == []  # refused before any handler or hook
    assert await dispatcher.call_tool(child, alpha, "alpha", {"text": "x"}, "call_a") == (
        "alpha ran")
    assert await dispatcher.call_tool(parent, beta, "beta", {"text": "x"}, "call_b") == (
        "beta ran")  # a top-level session has no allowlist
    assert handlers.names() == ["alpha", "beta"]
    release.set()
    assert await parent.subsessions.wait_child(cid) == "released"


@pytest.mark.parametrize("allowlist", [None, ["alpha"], []], ids=["none", "list", "empty"])
async def test_the_empty_tool_name_is_not_supported(
    engine: Engine, model: Model, handlers: Handlers, allowlist: list[str] | None
) -> None:
    agent = Profile(name="agent", tools=allowlist)
    parent = await root(engine, handlers.tool("alpha"), custom_agents=(agent,))
    model.play("work", [call(EMPTY, call_id="call_empty", text="x")])
    cid = await parent.subsessions.spawn_child("agent", "work")
    await parent.subsessions.wait_child(cid)
    assert model.last_output("work") == {
        "type": "function_call_output", "call_id": "call_empty",
        "output": "Tool '' is not supported by this client instance.", "success": False,
    }
    assert handlers.calls == []


@pytest.mark.in_process(TOP)
async def test_the_empty_tool_name_is_not_supported_for_a_top_level_session(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    parent = await root(engine, handlers.tool("alpha"))
    model.play("go", [call(EMPTY, text="x")])
    await parent.send_and_wait("go")
    assert model.last_output("go")["output"] == not_supported("")
    assert handlers.calls == []


@pytest.mark.parametrize("allowlist", [None, ["alpha", "nowhere"]], ids=["none", "list"])
async def test_a_tool_nobody_registered_is_not_supported(
    engine: Engine, model: Model, handlers: Handlers, allowlist: list[str] | None
) -> None:
    agent = Profile(name="agent", tools=allowlist)
    parent = await root(engine, handlers.tool("alpha"), custom_agents=(agent,))
    model.play("work", [call("nowhere", text="x")])
    cid = await parent.subsessions.spawn_child("agent", "work")
    await parent.subsessions.wait_child(cid)
    assert model.last_output("work")["output"] == not_supported("nowhere")
    assert model.last_output("work")["success"] is False
    assert handlers.calls == []


# -- invocation -----------------------------------------------------------------------------
async def test_the_handler_is_told_which_child_and_agent_called(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    parent = await root(engine, handlers.tool("save_result"))
    model.play("work", [call("save_result", call_id="call_save", text="42")])
    cid = await parent.subsessions.spawn_child("helper", "work")
    await parent.subsessions.wait_child(cid)
    [(name, arguments, invocation)] = handlers.calls
    assert (name, arguments) == ("save_result", {"text": "42"})
    assert invocation == Invocation(
        session_id=cid, tool_call_id="call_save", tool_name="save_result", agent_name="helper"
    )


@pytest.mark.in_process(TOP)
async def test_a_top_level_call_has_no_agent_name(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    parent = await root(engine, handlers.tool("save_result"))
    model.play("go", [call("save_result", call_id="call_top", text="x")])
    await parent.send_and_wait("go")
    [(_, _, invocation)] = handlers.calls
    assert invocation == Invocation(parent.session_id, "call_top", "save_result", None)


# -- tool definitions -----------------------------------------------------------------------
def definition(name: str) -> dict[str, Any]:
    return {"type": "function", "name": name, "description": f"The {name} tool.",
            "parameters": PARAMS}


async def test_a_child_is_offered_exactly_its_allowlisted_tools_in_allowlist_order(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    agent = Profile(name="ordered", developer_instructions="ORDERED",
                    tools=["gamma", "missing", "alpha"])
    parent = await root(engine, handlers.tool("alpha"), handlers.tool("beta"),
                        handlers.tool("gamma"), custom_agents=(agent,))
    cid = await parent.subsessions.spawn_child("ordered", "work")
    await parent.subsessions.wait_child(cid)
    [request] = model.requests["work"]
    assert request.instructions == "ORDERED"
    assert list(request.tools) == [definition("gamma"), definition("alpha")]


async def test_filtering_tools_for_a_child_leaves_the_callers_objects_untouched(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    agent = Profile(name="ordered", tools=["gamma", "missing", "alpha"])
    config = SessionConfig(
        tools=(handlers.tool("alpha"), handlers.tool("beta"), handlers.tool("gamma")),
        custom_agents=(agent,),
    )
    before = (attrs.asdict(config), copy.deepcopy(attrs.asdict(agent)), config.tools, agent.tools)
    parent = await engine.create_session(config)
    cid = await parent.subsessions.spawn_child("ordered", "work")
    await parent.subsessions.wait_child(cid)
    await parent.send_and_wait("go")
    assert (attrs.asdict(config), attrs.asdict(agent), config.tools, agent.tools) == before
    assert agent.tools == ("gamma", "missing", "alpha")
    assert [t.name for t in config.tools] == ["alpha", "beta", "gamma"]
    # the parent itself is still offered all of its tools
    assert list(model.last("go").tool_names[:3]) == ["alpha", "beta", "gamma"]


# -- subagent instances -------------------------------------------------------------------
async def test_two_concurrent_children_of_one_agent_are_two_instances(
    engine: Engine, model: Model
) -> None:
    parent = await root(engine)
    model.hold("one")
    model.hold("two")
    first = await parent.subsessions.spawn_child("helper", "one", call_id="call_1")
    second = await parent.subsessions.spawn_child("helper", "two", call_id="call_2")
    instances = engine.dispatcher.subagent_instances[parent.session_id]
    assert sorted(instances) == ["call_1", "call_2"]
    assert isinstance(instances["call_1"], SubagentInstance)
    assert (instances["call_1"].agent_name, instances["call_1"].tool_call_id,
            instances["call_1"].child_id) == ("helper", "call_1", first)
    assert (instances["call_2"].agent_name, instances["call_2"].tool_call_id,
            instances["call_2"].child_id) == ("helper", "call_2", second)
    assert instances["call_1"].started_at <= instances["call_2"].started_at
    assert engine.dispatcher.child_to_parent[first] == parent.session_id
    assert engine.dispatcher.child_to_parent[second] == parent.session_id
    assert engine.dispatcher.child_to_agent[first].name == "helper"


async def test_an_ended_child_loses_its_instance_but_late_requests_still_resolve(
    engine: Engine, model: Model
) -> None:
    parent = await root(engine)
    release = model.hold("one")
    model.hold("two")
    first = await parent.subsessions.spawn_child("helper", "one", call_id="call_1")
    await parent.subsessions.spawn_child("helper", "two", call_id="call_2")
    release.set()
    await parent.subsessions.wait_child(first)
    dispatcher = engine.dispatcher
    assert sorted(dispatcher.subagent_instances[parent.session_id]) == ["call_2"]
    assert dispatcher.child_to_parent[first] == parent.session_id
    assert dispatcher.child_to_agent[first].name == "helper"
    found, is_child = engine.resolve_session(first)
    assert found is parent
    assert is_child is True


# -- cleanup ----------------------------------------------------------------------------------
async def test_engine_close_clears_every_map(engine: Engine, model: Model) -> None:
    parents = [await root(engine), await root(engine)]
    for n, parent in enumerate(parents):
        model.hold(f"work {n}")
        await parent.subsessions.spawn_child("helper", f"work {n}")
    assert len(engine.dispatcher.child_to_parent) == 2
    await engine.close()
    dispatcher = engine.dispatcher
    assert dispatcher.child_to_parent == {}
    assert dispatcher.child_to_agent == {}
    assert dispatcher.subagent_instances == {}
    with pytest.raises(UnknownSession):
        engine.resolve_session(parents[0].session_id)


@pytest.mark.parametrize("how", ["destroy_session", "delete_session"])
async def test_removing_one_of_two_parents_removes_only_its_childrens_entries(
    engine: Engine, model: Model, how: str
) -> None:
    nester = Profile(name="nester")
    gone = await root(engine, custom_agents=(nester,))
    kept = await root(engine, custom_agents=(nester,))
    for prompt in ("gone child", "gone grandchild", "kept child"):
        model.hold(prompt)
    gone_child = await gone.subsessions.spawn_child("nester", "gone child")
    await model.reached("gone child")
    gone_grandchild = await session_of(gone, gone_child).subsessions.spawn_child(
        "nester", "gone grandchild")
    kept_child = await kept.subsessions.spawn_child("nester", "kept child", call_id="call_k")
    for prompt in ("gone grandchild", "kept child"):
        await model.reached(prompt)

    await getattr(engine, how)(gone.session_id)

    dispatcher = engine.dispatcher
    assert dispatcher.child_to_parent == {kept_child: kept.session_id}
    assert list(dispatcher.child_to_agent) == [kept_child]
    assert gone.session_id not in dispatcher.subagent_instances
    assert gone_child not in dispatcher.subagent_instances
    assert list(dispatcher.subagent_instances[kept.session_id]) == ["call_k"]
    assert engine.resolve_session(kept_child) == (kept, True)
    for orphan in (gone_child, gone_grandchild):
        with pytest.raises(UnknownSession):
            engine.resolve_session(orphan)


async def test_destroying_a_parent_ends_a_grandchild_whose_parent_never_started(
    engine: Engine, model: Model
) -> None:
    gone = await root(engine, custom_agents=(Profile(name="nester"),))
    model.hold("gone child")
    model.hold("gone grandchild")
    gone_child = await gone.subsessions.spawn_child("nester", "gone child")
    child = session_of(gone, gone_child)
    grandchild = await child.subsessions.spawn_child("nester", "gone grandchild")
    try:
        await engine.destroy_session(gone.session_id)  # before the child took a step
        assert child.subsessions.status(grandchild) is ChildStatus.CANCELLED
    finally:  # without this, engine close waits for the orphan forever
        await child.subsessions.cancel_child(grandchild)


async def test_a_child_never_reaches_another_parents_handlers(
    engine: Engine, model: Model
) -> None:
    mine, theirs = Handlers(), Handlers()
    parent_a = await root(engine, mine.tool("save_result"))
    parent_b = await root(engine, theirs.tool("save_result"))
    model.play("a work", [call("save_result", text="from a")])
    model.play("b work", [call("save_result", text="from b")])
    a_child = await parent_a.subsessions.spawn_child("helper", "a work")
    b_child = await parent_b.subsessions.spawn_child("helper", "b work")
    await parent_a.subsessions.wait_child(a_child)
    await parent_b.subsessions.wait_child(b_child)
    assert [(a, i.session_id) for _, a, i in mine.calls] == [({"text": "from a"}, a_child)]
    assert [(a, i.session_id) for _, a, i in theirs.calls] == [({"text": "from b"}, b_child)]


async def test_another_parent_cannot_answer_a_childs_deferred_call(
    engine: Engine, model: Model, stream_of: Any
) -> None:
    lookup = Tool("lookup", "Looks up.", PARAMS)
    parent_a = await root(engine, lookup, custom_agents=(Profile(name="any"),))
    parent_b = await root(engine, lookup, custom_agents=(Profile(name="any"),))
    stream = await stream_of(parent_a)
    model.play("work", [call("lookup", text="q")])
    cid = await parent_a.subsessions.spawn_child("any", "work")
    request_id = (await stream.first("external_tool.requested")).data["request_id"]
    assert parent_b.handle_pending_tool_call(request_id, result="from b") is False
    assert parent_a.handle_pending_tool_call(request_id, result="from a") is True
    await parent_a.subsessions.wait_child(cid)
    assert model.last_output("work")["output"] == "from a"


# -- deferred tools -----------------------------------------------------------------------
async def test_a_childs_deferred_call_is_requested_on_the_top_level_stream_and_answered(
    engine: Engine, model: Model, stream_of: Any
) -> None:
    lookup = Tool("lookup", "Looks up.", PARAMS)  # handler=None: the host answers
    parent = await root(engine, lookup, custom_agents=(Profile(name="any"),))
    stream = await stream_of(parent)
    model.play("work", [call("lookup", call_id="call_look", text="weather")])
    cid = await parent.subsessions.spawn_child("any", "work")

    event = await stream.first("external_tool.requested")
    request_id = event.data["request_id"]
    assert isinstance(request_id, str)
    assert request_id
    assert {k: v for k, v in event.data.items() if k != "request_id"} == {
        "session_id": cid, "tool_call_id": "call_look", "tool_name": "lookup",
        "arguments": {"text": "weather"},
    }
    assert parent.subsessions.status(cid) is ChildStatus.PENDING  # waiting on the host
    assert parent.handle_pending_tool_call(request_id, result={"sunny": True}) is True

    assert await parent.subsessions.wait_child(cid) == "done work"
    assert model.last_output("work") == {
        "type": "function_call_output", "call_id": "call_look",
        "output": '{"sunny":true}', "success": True,
    }
    assert parent.handle_pending_tool_call(request_id, result="twice") is False


async def test_a_deferred_call_the_allowlist_denies_emits_nothing_and_fails_at_once(
    engine: Engine, model: Model
) -> None:
    parent = await root(engine, Tool("lookup", "Looks up.", PARAMS))  # helper: save_result only
    seen = collect(parent)
    model.play("work", [call("lookup", text="weather")])
    cid = await parent.subsessions.spawn_child("helper", "work")
    assert await parent.subsessions.wait_child(cid) == "done work"  # nobody had to answer
    assert model.last_output("work")["output"] == not_supported("lookup")
    assert model.last_output("work")["success"] is False
    assert of_type(seen, "external_tool.requested") == []


async def a_child_waiting_on_the_host(
    engine: Engine, model: Model
) -> tuple[Session, str, list[SessionEvent]]:
    """A child whose call of the deferred `lookup` tool waits on the host: its parent, its
    id and every event the parent saw, once the call has been requested."""
    parent = await root(engine, Tool("lookup", "Looks up.", PARAMS),
                        custom_agents=(Profile(name="any"),))
    requested = asyncio.Event()
    seen = collect(parent)
    parent.on(lambda e: e.type == "external_tool.requested" and requested.set())
    model.play("work", [call("lookup", text="weather")])
    cid = await parent.subsessions.spawn_child("any", "work")
    await requested.wait()
    return parent, cid, seen


async def test_a_deferred_call_answered_with_an_error_is_a_failed_output(
    engine: Engine, model: Model
) -> None:
    parent, cid, seen = await a_child_waiting_on_the_host(engine, model)
    [event] = of_type(seen, "external_tool.requested")
    assert parent.handle_pending_tool_call(event.data["request_id"], error="backend down")
    await parent.subsessions.wait_child(cid)
    assert model.last_output("work")["output"] == "backend down"
    assert model.last_output("work")["success"] is False


async def test_a_deferred_call_may_be_answered_from_another_thread(
    engine: Engine, model: Model
) -> None:
    parent, cid, seen = await a_child_waiting_on_the_host(engine, model)
    request_id = of_type(seen, "external_tool.requested")[0].data["request_id"]
    answered: list[bool] = []
    host = threading.Thread(
        target=lambda: answered.append(parent.handle_pending_tool_call(request_id, result="ok"))
    )
    host.start()
    host.join()
    assert answered == [True]
    await parent.subsessions.wait_child(cid)
    assert model.last_output("work")["output"] == "ok"


async def test_a_deferred_call_cancelled_while_pending_is_forgotten(
    engine: Engine, model: Model
) -> None:
    parent, cid, seen = await a_child_waiting_on_the_host(engine, model)
    request_id = of_type(seen, "external_tool.requested")[0].data["request_id"]

    assert await parent.subsessions.cancel_child(cid) is True
    assert parent.subsessions.status(cid) is ChildStatus.CANCELLED
    assert parent.handle_pending_tool_call(request_id, result="too late") is False
    assert engine.dispatcher._pending == {}  # no request left behind
    assert len(model.requests["work"]) == 1  # the late answer reached no model


# -- permissions ----------------------------------------------------------------------------
class Approver:
    """A permission handler that approves every request and keeps what it was asked."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> str:
        self.asked.append(request)
        return "approved"


async def test_a_tool_that_needs_permission_is_denied_without_a_handler(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    parent = await root(engine, handlers.tool("save_result", requires_permission=True))
    model.play("work", [call("save_result", text="x")])
    cid = await parent.subsessions.spawn_child("helper", "work")
    assert await parent.subsessions.wait_child(cid) == "done work"  # nobody was waited on
    output = model.last_output("work")
    assert output["success"] is False
    assert NO_APPROVAL in output["output"]
    assert handlers.calls == []


async def test_an_approving_permission_handler_lets_the_tool_run(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    approve = Approver()
    parent = await root(engine, handlers.tool("save_result", requires_permission=True),
                        permission_handler=approve)
    model.play("go", [call("save_result", call_id="call_p", text="x")])
    await parent.send_and_wait("go")
    assert model.last_output("go")["output"] == "save_result ran"
    assert handlers.names() == ["save_result"]
    [request] = approve.asked
    assert request["session_id"] == parent.session_id
    assert request["tool_name"] == "save_result"
    assert request["tool_call_id"] == "call_p"


async def deny_interactively(request: dict[str, Any]) -> dict[str, str]:
    return {"kind": "denied-interactively-by-user"}


def broken_permission_handler(request: dict[str, Any]) -> str:
    raise RuntimeError("handler broke")


@pytest.mark.parametrize(
    ("handler", "denial"),
    [
        (deny_interactively, "denied-interactively-by-user"),
        (broken_permission_handler, NO_APPROVAL),
    ],
    ids=["denies-with-a-kind", "raises"],
)
async def test_a_permission_handler_that_denies_or_raises_denies(
    engine: Engine, model: Model, handlers: Handlers, handler: Callable[..., Any], denial: str
) -> None:
    parent = await root(engine, handlers.tool("save_result", requires_permission=True),
                        permission_handler=handler)
    model.play("go", [call("save_result", text="x")])
    await parent.send_and_wait("go")
    assert denial in model.last_output("go")["output"]
    assert model.last_output("go")["success"] is False
    assert handlers.calls == []


async def test_an_unknown_permission_answer_denies(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    parent = await root(engine, handlers.tool("save_result", requires_permission=True),
                        permission_handler=lambda request: "sure, why not")
    model.play("go", [call("save_result", text="x")])
    await parent.send_and_wait("go")
    assert NO_APPROVAL in model.last_output("go")["output"]
    assert handlers.calls == []


async def test_a_childs_permission_request_reaches_the_roots_handler(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    approve = Approver()
    parent = await root(engine, handlers.tool("save_result", requires_permission=True),
                        permission_handler=approve)
    seen = collect(parent)
    model.play("work", [call("save_result", call_id="call_p", text="x")])
    cid = await parent.subsessions.spawn_child("helper", "work")
    await parent.subsessions.wait_child(cid)
    [request] = approve.asked
    assert request["session_id"] == cid
    assert request["tool_name"] == "save_result"
    assert request["arguments"] == {"text": "x"}
    assert handlers.calls[0][2].session_id == cid
    [event] = of_type(seen, "permission.requested")
    assert event.data["session_id"] == cid


# -- hooks --------------------------------------------------------------------------------------
class HookLog:
    """Hook functions that record their inputs; `answer` decides what each returns."""

    def __init__(self, **answers: Any) -> None:
        self.inputs: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
        self.answers = answers
        self.fired: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    def _hook(self, name: str) -> Callable[[dict[str, Any]], Any]:
        def hook(data: dict[str, Any]) -> Any:
            self.inputs[name].append(data)
            self.fired[name].set()
            answer = self.answers.get(name)
            return answer(data) if callable(answer) else answer

        hook.__name__ = name
        return hook

    def hooks(self) -> Hooks:
        names = ("on_pre_tool_use", "on_post_tool_use", "on_user_prompt_submitted",
                 "on_session_start", "on_session_end", "on_error_occurred")
        return Hooks(**{name: self._hook(name) for name in names})

    def ids(self, name: str, tool: str | None = None) -> list[str]:
        return [d["session_id"] for d in self.inputs[name]
                if tool is None or d.get("tool_name") == tool]


async def test_a_pre_tool_hook_may_deny_the_call(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    log = HookLog(on_pre_tool_use={"permissionDecision": "deny",
                                   "permissionDecisionReason": "not on a friday"})
    parent = await root(engine, handlers.tool("save_result"), hooks=log.hooks())
    model.play("work", [call("save_result", text="x")])
    cid = await parent.subsessions.spawn_child("helper", "work")
    await parent.subsessions.wait_child(cid)
    assert model.last_output("work")["success"] is False
    assert "not on a friday" in model.last_output("work")["output"]
    assert handlers.calls == []


async def test_a_pre_tool_hook_may_replace_the_arguments(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    log = HookLog(on_pre_tool_use={"modifiedArgs": {"text": "rewritten"}})
    parent = await root(engine, handlers.tool("save_result"), hooks=log.hooks())
    model.play("work", [call("save_result", text="original")])
    cid = await parent.subsessions.spawn_child("helper", "work")
    await parent.subsessions.wait_child(cid)
    assert [args for _, args, _ in handlers.calls] == [{"text": "rewritten"}]
    [pre] = log.inputs["on_pre_tool_use"]
    assert pre["tool_name"] == "save_result"
    assert pre["tool_args"] == {"text": "original"}
    assert pre["session_id"] == cid


async def test_a_post_tool_hook_may_replace_the_result(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    log = HookLog(on_post_tool_use={"modifiedResult": "redacted"})
    parent = await root(engine, handlers.tool("save_result"), hooks=log.hooks())
    model.play("work", [call("save_result", text="secret")])
    cid = await parent.subsessions.spawn_child("helper", "work")
    await parent.subsessions.wait_child(cid)
    assert model.last_output("work")["output"] == "redacted"
    assert model.last_output("work")["success"] is True
    [post] = log.inputs["on_post_tool_use"]
    assert post["tool_result"] == "save_result ran"
    assert post["session_id"] == cid


async def test_a_hook_that_raises_is_ignored(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    def broken(data: dict[str, Any]) -> Any:
        raise RuntimeError("hook broke")

    log = HookLog(on_pre_tool_use=broken, on_post_tool_use=broken,
                  on_user_prompt_submitted=broken)
    parent = await root(engine, handlers.tool("save_result"), hooks=log.hooks())
    model.play("go", [call("save_result", text="x")])
    assert await parent.send_and_wait("go") == "done go"
    assert model.last_output("go")["output"] == "save_result ran"
    assert model.last_output("go")["success"] is True
    assert handlers.names() == ["save_result"]
    assert len(log.inputs["on_pre_tool_use"]) == len(log.inputs["on_post_tool_use"]) == 1


@pytest.mark.in_process(GRAND)
async def test_tool_hooks_fire_for_a_grandchilds_call_with_the_grandchilds_id(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    log = HookLog()
    nester = Profile(name="nester", developer_instructions="NESTER")  # no allowlist
    parent = await root(engine, handlers.tool("save_result"), hooks=log.hooks(),
                        custom_agents=(nester,), max_depth=2)
    model.play("go", [call("create_session", session_type="nester", prompt="level 1")], wait_for)
    model.play("level 1", [call("create_session", session_type="nester", prompt="level 2")],
               wait_for)
    model.play("level 2", [call("save_result", text="deep")])
    assert await parent.send_and_wait("go") == "done go"

    child, grandchild = parent.subsessions.tree()
    assert (child.depth, grandchild.depth) == (1, 2)
    assert log.ids("on_pre_tool_use", "save_result") == [grandchild.session_id]
    assert log.ids("on_post_tool_use", "save_result") == [grandchild.session_id]
    [(_, _, invocation)] = handlers.calls
    assert (invocation.session_id, invocation.agent_name) == (grandchild.session_id, "nester")


async def test_tool_hooks_fire_for_built_in_tool_calls_too(
    engine: Engine, model: Model
) -> None:
    log = HookLog()
    parent = await root(engine, hooks=log.hooks(), user_input_handler=lambda request: "yes")
    model.play("go", [call("ask_user", question="ok?")],
                     [call("create_session", session_type="helper", prompt="work")], wait_for)
    await parent.send_and_wait("go")
    names = [d["tool_name"] for d in log.inputs["on_pre_tool_use"]]
    assert names == ["ask_user", "create_session", "wait_session"]
    assert [d["tool_name"] for d in log.inputs["on_post_tool_use"]] == names


async def test_the_prompt_hook_fires_for_a_childs_prompt_and_may_rewrite_it(
    engine: Engine, model: Model
) -> None:
    log = HookLog(on_user_prompt_submitted=lambda data: {"modifiedPrompt": "rewritten"})
    parent = await root(engine, hooks=log.hooks())
    cid = await parent.subsessions.spawn_child("helper", "original")
    assert await parent.subsessions.wait_child(cid) == "done rewritten"
    [submitted] = log.inputs["on_user_prompt_submitted"]
    assert submitted["session_id"] == cid
    assert submitted["prompt"] == "original"
    assert "original" not in model.requests  # the model only ever saw the rewritten prompt


async def test_the_session_start_hook_fires_for_top_level_and_child_sessions(
    engine: Engine, model: Model
) -> None:
    log = HookLog()
    parent = await root(engine, hooks=log.hooks())
    assert [(d["session_id"], d["source"]) for d in log.inputs["on_session_start"]] == [
        (parent.session_id, "exec"),
    ]
    cid = await parent.subsessions.spawn_child("helper", "work")
    await parent.subsessions.wait_child(cid)
    assert [d["session_id"] for d in log.inputs["on_session_start"]] == [parent.session_id, cid]
    assert log.inputs["on_session_start"][1]["source"] == "subsession"


async def test_the_session_end_hook_fires_when_a_child_ends(
    engine: Engine, model: Model
) -> None:
    log = HookLog()
    parent = await root(engine, hooks=log.hooks())
    cid = await parent.subsessions.spawn_child("helper", "work")
    await parent.subsessions.wait_child(cid)
    await asyncio.wait_for(log.fired["on_session_end"].wait(), 10)
    [ended] = log.inputs["on_session_end"]
    assert ended["session_id"] == cid
    assert ended["reason"] == "complete"


async def test_the_error_hook_fires_when_a_childs_model_fails(
    engine: Engine, model: Model
) -> None:
    log = HookLog()
    parent = await root(engine, hooks=log.hooks())
    model.play("work", RuntimeError("model broke"))
    cid = await parent.subsessions.spawn_child("helper", "work")
    with pytest.raises(ChildFailed):
        await parent.subsessions.wait_child(cid)
    await asyncio.wait_for(log.fired["on_error_occurred"].wait(), 10)
    [error] = log.inputs["on_error_occurred"]
    assert error["session_id"] == cid
    assert "model broke" in error["error"]


# -- user input -------------------------------------------------------------------------------
@pytest.mark.parametrize("registered", [True, False], ids=["handler", "no-handler"])
async def test_ask_user_is_offered_only_with_a_user_input_handler(
    engine: Engine, model: Model, registered: bool
) -> None:
    handler = (lambda request: "yes") if registered else None
    parent = await root(engine, user_input_handler=handler,
                        custom_agents=(Profile(name="any"),))
    await parent.send_and_wait("go")
    cid = await parent.subsessions.spawn_child("any", "work")
    await parent.subsessions.wait_child(cid)
    assert ("ask_user" in model.last("go").tool_names) is registered
    assert ("ask_user" in model.last("work").tool_names) is registered


async def test_ask_user_without_a_handler_is_not_supported(
    engine: Engine, model: Model
) -> None:
    parent = await root(engine)
    model.play("go", [call("ask_user", question="ok?")])
    await parent.send_and_wait("go")
    assert model.last_output("go")["output"] == not_supported("ask_user")
    assert model.last_output("go")["success"] is False


async def test_a_childs_question_reaches_the_roots_user_input_handler(
    engine: Engine, model: Model
) -> None:
    asked: list[dict[str, Any]] = []

    async def answer(request: dict[str, Any]) -> str:
        asked.append(request)
        return "blue"

    parent = await root(engine, user_input_handler=answer,
                        custom_agents=(Profile(name="any"),))
    model.play("work", [call("ask_user", question="Which colour?", choices=["red", "blue"])])
    cid = await parent.subsessions.spawn_child("any", "work")
    await parent.subsessions.wait_child(cid)
    assert asked == [{"question": "Which colour?", "choices": ["red", "blue"], "session_id": cid}]
    assert model.last_output("work")["output"] == "blue"
    assert model.last_output("work")["success"] is True


async def test_a_child_whose_agent_may_use_no_tool_can_still_ask_the_user(
    engine: Engine, model: Model
) -> None:
    """The allowlist never gates user input (DESIGN 3.6): `mathematician` has `tools=[]`."""
    asked: list[dict[str, Any]] = []

    def answer(request: dict[str, Any]) -> str:
        asked.append(request)
        return "seven"

    parent = await root(engine, user_input_handler=answer)
    model.play("count", [call("ask_user", call_id="call_ask", question="How many?")])
    cid = await parent.subsessions.spawn_child("mathematician", "count")
    assert await parent.subsessions.wait_child(cid) == "done count"
    first = model.requests["count"][0].tool_names
    assert "ask_user" in first
    assert not set(first) - {"ask_user", "create_session", "wait_session", "cancel_session",
                             "wait_sessions", "run_sessions", "list_profiles"}
    assert model.last_output("count") == {
        "type": "function_call_output", "call_id": "call_ask", "output": "seven",
        "success": True,
    }
    assert asked == [{"question": "How many?", "choices": None, "session_id": cid}]


# -- what handlers return -----------------------------------------------------------------------
def _nothing(arguments: dict[str, Any], invocation: Invocation) -> None:
    return None


async def _nothing_later(arguments: dict[str, Any], invocation: Invocation) -> None:
    await asyncio.sleep(0)


@pytest.mark.parametrize("handler", [_nothing, _nothing_later], ids=["sync", "async"])
async def test_a_tool_handler_that_returns_none_gives_the_model_an_empty_text(
    engine: Engine, model: Model, handler: Any
) -> None:
    parent = await root(engine, Tool("quiet", "Returns nothing.", PARAMS, handler=handler),
                        custom_agents=(Profile(name="any"),))
    model.play("work", [call("quiet", call_id="call_quiet", text="x")])
    cid = await parent.subsessions.spawn_child("any", "work")
    assert await parent.subsessions.wait_child(cid) == "done work"
    assert model.last_output("work") == {
        "type": "function_call_output", "call_id": "call_quiet", "output": "", "success": True,
    }


async def test_a_deferred_call_answered_with_none_gives_the_model_an_empty_text(
    engine: Engine, model: Model
) -> None:
    parent, cid, seen = await a_child_waiting_on_the_host(engine, model)
    [event] = of_type(seen, "external_tool.requested")
    assert parent.handle_pending_tool_call(event.data["request_id"], result=None)
    await parent.subsessions.wait_child(cid)
    assert model.last_output("work")["output"] == ""
    assert model.last_output("work")["success"] is True


# -- re-entrancy ------------------------------------------------------------------------------
async def test_a_handler_may_resolve_create_and_destroy_sessions(
    engine: Engine, model: Model
) -> None:
    made: list[str] = []

    async def busy(arguments: dict[str, Any], invocation: Invocation) -> str:
        assert engine.resolve_session(invocation.session_id)[1] is True
        other = await engine.create_session(SessionConfig())
        made.append(other.session_id)
        await engine.destroy_session(other.session_id)
        return "busy done"

    def approve(request: dict[str, Any]) -> str:
        engine.resolve_session(request["session_id"])
        return "approved"

    parent = await root(engine, Tool("save_result", "Saves.", PARAMS, busy,
                                     requires_permission=True),
                        permission_handler=approve)
    model.play("work", [call("save_result", text="x")])
    cid = await parent.subsessions.spawn_child("helper", "work")
    await asyncio.wait_for(parent.subsessions.wait_child(cid), 10)
    assert model.last_output("work")["output"] == "busy done"
    assert engine.get_session(made[0]) is None


# -- events ---------------------------------------------------------------------------------
async def test_subagent_started_names_the_call_the_agent_and_the_child(
    engine: Engine, model: Model
) -> None:
    parent = await root(engine)
    seen = collect(parent)
    cid = await parent.subsessions.spawn_child("helper", "work", call_id="call_spawn")
    [started] = of_type(seen, "subagent.started")
    assert started.session_id == parent.session_id
    assert started.data == {
        "tool_call_id": "call_spawn", "agent_name": "helper",
        "agent_display_name": "helper", "remote_session_id": cid,
    }
    await parent.subsessions.wait_child(cid)


async def test_subagent_completed_reports_tokens_tool_calls_and_duration(
    engine: Engine, model: Model, handlers: Handlers
) -> None:
    parent = await root(engine, handlers.tool("save_result"))
    seen = collect(parent)
    model.play("work", [call("save_result", text="x")])
    cid = await parent.subsessions.spawn_child("helper", "work", call_id="call_spawn")
    await parent.subsessions.wait_child(cid)
    [completed] = of_type(seen, "subagent.completed")
    data = completed.data
    assert data["tool_call_id"] == "call_spawn"
    assert data["agent_name"] == "helper"
    assert data["remote_session_id"] == cid
    assert data["total_tokens"] == session_of(parent, cid).usage().total_tokens > 0
    assert data["total_tool_calls"] == 1
    assert isinstance(data["duration_ms"], int)
    assert data["duration_ms"] >= 0
    assert "error" not in data
    assert of_type(seen, "subagent.failed") == []


async def test_subagent_failed_carries_the_error(engine: Engine, model: Model) -> None:
    parent = await root(engine)
    seen = collect(parent)
    model.play("work", RuntimeError("model broke"))
    cid = await parent.subsessions.spawn_child("helper", "work", call_id="call_spawn")
    with pytest.raises(ChildFailed):
        await parent.subsessions.wait_child(cid)
    [failed] = of_type(seen, "subagent.failed")
    assert failed.data["error"] == "model broke"
    assert failed.data["tool_call_id"] == "call_spawn"
    assert failed.data["remote_session_id"] == cid
    assert not failed.data.get("cancelled")
    assert of_type(seen, "subagent.completed") == []


async def test_subagent_failed_says_cancelled_when_the_child_was_cancelled(
    engine: Engine, model: Model
) -> None:
    parent = await root(engine)
    seen = collect(parent)
    model.hold("work")
    cid = await parent.subsessions.spawn_child("helper", "work", call_id="call_spawn")
    await model.reached("work")
    assert await parent.subsessions.cancel_child(cid) is True
    [failed] = of_type(seen, "subagent.failed")
    assert failed.data["cancelled"] is True
    assert failed.data["error"]
    assert failed.data["remote_session_id"] == cid


async def test_child_events_reach_the_parents_stream_nested_under_the_spawning_call(
    engine: Engine, model: Model, handlers: Handlers, stream_of: Any
) -> None:
    parent = await root(engine, handlers.tool("save_result"))
    stream = await stream_of(parent)
    model.play("go", [call("create_session", call_id="call_spawn", session_type="helper",
                           prompt="work")], wait_for)
    model.play("work", [call("save_result", text="x")])
    await parent.send_and_wait("go")
    await engine.close()
    await asyncio.wait_for(stream.task, 10)  # the stream ended with the engine

    cid = of_type(stream.events, "subagent.started")[0].data["remote_session_id"]
    from_child = [e for e in stream.events if e.session_id == cid]
    assert {e.type for e in from_child} >= {
        "tool.execution_start", "tool.execution_complete", "assistant.message", "session.idle",
    }
    assert all(e.data["parent_tool_call_id"] == "call_spawn" for e in from_child)
    strays = [e for e in stream.events
              if e.session_id != parent.session_id and "parent_tool_call_id" not in e.data]
    assert strays == []
    types = [e.type for e in stream.events]
    assert types.index("subagent.started") < stream.events.index(from_child[0])
    assert types.index("subagent.completed") > stream.events.index(from_child[-1])


@pytest.mark.in_process(GRAND)
async def test_grandchild_events_reach_the_root_nested_under_their_own_spawning_call(
    engine: Engine, model: Model, stream_of: Any
) -> None:
    nester = Profile(name="nester")
    parent = await root(engine, custom_agents=(nester,), max_depth=2)
    stream = await stream_of(parent)
    model.play("go", [call("create_session", call_id="call_l1", session_type="nester",
                           prompt="level 1")], wait_for)
    model.play("level 1", [call("create_session", call_id="call_l2", session_type="nester",
                                prompt="level 2")], wait_for)
    await parent.send_and_wait("go")
    await engine.close()
    await asyncio.wait_for(stream.task, 10)

    child, grandchild = parent.subsessions.tree()
    nested = {e.session_id: e.data.get("parent_tool_call_id") for e in stream.events
              if e.session_id != parent.session_id}
    assert nested == {child.session_id: "call_l1", grandchild.session_id: "call_l2"}
    assert any(e.session_id == grandchild.session_id and e.type == "assistant.message"
               for e in stream.events)


async def test_the_event_stream_ends_when_the_engine_closes(
    engine: Engine, model: Model, stream_of: Any
) -> None:
    parent = await root(engine)
    stream = await stream_of(parent)
    await parent.send_and_wait("go")
    await stream.first("session.idle")
    assert not stream.task.done()
    await engine.close()
    await asyncio.wait_for(stream.task, 10)
    assert stream.task.exception() is None


async def test_a_stream_opened_after_the_engine_closed_ends_at_once(
    engine: Engine, model: Model
) -> None:
    parent = await root(engine)
    await engine.close()

    async def drain() -> list[SessionEvent]:
        return [event async for event in parent.event_stream()]

    assert await asyncio.wait_for(drain(), 1) == []


async def test_the_event_stream_has_every_event_from_the_moment_it_is_taken(
    engine: Engine, model: Model
) -> None:
    parent = await root(engine)
    stream = parent.event_stream()  # taken before the task; iterated after it
    await parent.send_and_wait("go")
    start = await asyncio.wait_for(anext(stream), 1)
    first = await asyncio.wait_for(anext(stream), 1)
    await stream.aclose()
    assert start.type == "session.start"
    assert first.type == "assistant.message"
    assert first.data["content"] == "done go"


async def test_a_stream_nobody_reads_cannot_make_a_deferred_call_wait(
    engine: Engine, model: Model
) -> None:
    """A stream taken but not read answers nothing: the call fails at once, not never."""
    parent = await root(engine, Tool("lookup", "Looks up.", PARAMS))
    stream = parent.event_stream()
    model.play("go", [call("lookup", text="weather")])
    assert await asyncio.wait_for(parent.send_and_wait("go"), 10) == "done go"
    assert model.last_output("go")["output"] == not_supported("lookup")
    assert model.last_output("go")["success"] is False
    # it still has every event from the moment it was taken, for when it is read
    assert (await asyncio.wait_for(anext(stream), 1)).type == "session.start"
    await stream.aclose()


async def test_a_dropped_stream_stops_listening_at_once(engine: Engine, model: Model) -> None:
    parent = await root(engine, Tool("lookup", "Looks up.", PARAMS))
    model.play("go", ["hello"], [call("lookup", text="weather")])  # a second task calls it
    unread = parent.event_stream()
    read = parent.event_stream()
    assert await parent.send_and_wait("go") == "hello"
    assert (await asyncio.wait_for(anext(read), 1)).type == "session.start"
    del unread, read  # forgotten by the host, never closed
    assert await asyncio.wait_for(parent.send_and_wait("again"), 10) == "done go"
    assert model.last_output("go")["output"] == not_supported("lookup")


async def test_closing_a_stream_ends_the_reader_waiting_on_it(engine: Engine) -> None:
    parent = await root(engine)
    stream = parent.event_stream()
    reader = asyncio.create_task(anext(stream, "ended"))
    await stream.aclose()
    assert await asyncio.wait_for(reader, 1) == "ended"
    assert await anext(stream, "ended") == "ended"


# -- threads --------------------------------------------------------------------------------
async def test_a_thousand_children_resolve_and_end_while_threads_read_the_maps(
    home: Path,
) -> None:
    n = 1000
    arrived = 0
    everyone_in = asyncio.Event()

    async def respond(request: ModelRequest) -> list[Any]:
        nonlocal arrived
        if outputs(request):
            return ["done"]
        arrived += 1
        if arrived == n:
            everyone_in.set()
        await everyone_in.wait()  # all n children are alive at once
        return [call("ping", text="x")]

    resolved: list[bool] = []

    def ping(arguments: dict[str, Any], invocation: Invocation) -> str:
        found, is_child = engine.resolve_session(invocation.session_id)
        resolved.append(found is parent and is_child)
        return "pong"

    async with Engine(home, model_client=ScriptedModel(respond)) as engine:
        parent = await engine.create_session(SessionConfig(
            tools=(Tool("ping", "Pings.", PARAMS, ping),),
            custom_agents=(Profile(name="pinger"),), max_children=n,
        ))
        pid = parent.session_id
        ids: list[str] = []
        stop = threading.Event()
        errors: list[BaseException] = []
        rounds = [0, 0]

        def resolver() -> None:
            try:
                while not stop.is_set():
                    assert engine.resolve_session(pid) == (parent, False)
                    for cid in ids[-64:]:
                        assert engine.resolve_session(cid) == (parent, True)
                    rounds[0] += 1
                    time.sleep(0)  # let the loop thread take the GIL back
            except BaseException as exc:
                errors.append(exc)

        def reader() -> None:
            dispatcher = engine.dispatcher
            try:
                while not stop.is_set():
                    assert set(dispatcher.child_to_parent.copy().values()) <= {pid}
                    assert {a.name for a in dispatcher.child_to_agent.copy().values()} <= {
                        "pinger"}
                    for instances in dispatcher.subagent_instances.copy().values():
                        for key, instance in instances.copy().items():
                            assert instance.tool_call_id == key
                    rounds[1] += 1
                    time.sleep(0)  # let the loop thread take the GIL back
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=resolver), threading.Thread(target=reader)]
        for thread in threads:
            thread.start()
        try:
            for i in range(n):
                ids.append(await parent.subsessions.spawn_child("pinger", f"job {i}"))
            results = await asyncio.gather(*(parent.subsessions.wait_child(c) for c in ids))
        finally:
            stop.set()
            for thread in threads:
                thread.join(10)
        assert not any(thread.is_alive() for thread in threads), "a reader deadlocked"
        assert errors == []
        assert results == ["done"] * n
        assert resolved == [True] * n
        assert min(rounds) > 0
        assert engine.dispatcher.subagent_instances[pid] == {}
        assert len(engine.dispatcher.child_to_parent) == n
