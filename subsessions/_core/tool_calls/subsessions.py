"""Running the model-callable sub-session tools against a session's manager."""

from __future__ import annotations

from typing import Any, Literal

import orjson
from attrs import define

from subsessions._core import waits
from subsessions._core.manager import SubsessionManager
from subsessions._core.spawning import isolation_of
from subsessions._core.specs import SCHEMAS, batch_schema, create_schema, run_schema
from subsessions._core.waits import Spawner
from subsessions.budget import parse_budget
from subsessions.errors import InvalidArguments, UnknownSessionType, echo
from subsessions.tools.schema import check_arguments, fork_turns_of, parse_arguments
from subsessions.tools.schema import check_output_schema as check_schema


def _dump(value: Any) -> str:
    return orjson.dumps(value).decode()


async def call(manager: SubsessionManager, name: str, raw: str, call_id: str) -> str:
    """Run one of the sub-session tools for `manager`'s session; errors are raised with
    tools' error texts."""
    return await call_parsed(manager, name, parse_arguments(name, raw), call_id)


async def call_parsed(
    manager: SubsessionManager, name: str, arguments: dict[str, Any], call_id: str
) -> str:
    if name == "create_session":
        return _dump({"session_id": await create(manager, arguments, call_id)})
    if name == "run_sessions":
        return await run_plan(parse_run(manager, arguments), manager, call_id)
    if name == "run_batch":
        return await run_batch(manager, arguments, call_id)
    check_arguments(name, SCHEMAS[name], arguments)
    if name == "list_profiles":
        return _dump([
            {"name": p.name, "description": p.description,
             "tools": None if p.tools is None else list(p.tools)}
            for p in manager.profiles().values()
        ])
    if name == "wait_sessions":
        return await _wait_sessions(manager, arguments)
    if name == "list_sessions":
        return _dump(list_sessions(manager))
    session_id: str = arguments["session_id"]  # any id not of a child: `unknown session`
    if name == "send_message":
        return _dump({"delivered": await manager.send_message(session_id,
                                                              arguments["message"])})
    if name == "wait_session":
        timeout_ms = int(arguments["timeout_ms"])  # clamped where every wait is (waits.py)
        result = await manager.wait_child_ms(session_id, timeout_ms)
        worktree = manager.info(session_id).worktree  # the one it left
        return _dump({"result": result} if worktree is None else
                     {"result": result, "worktree": worktree})
    cancelled = await manager.cancel_child(session_id)
    if cancelled:
        manager.mark_seen(session_id)  # the model cancelled it: no notice needed
    return _dump({"cancelled": cancelled})


async def create(
    manager: SubsessionManager, arguments: dict[str, Any], call_id: str,
    tool: str = "create_session",
) -> str:
    """`create_session` (and MCP's `run_session`): the new child's id. `budget` may be
    omitted (MCP callers) as well as null."""
    profiles = manager.profiles()
    schema = create_schema(list(profiles))
    schema["properties"]["session_type"] = {"type": "string"}  # unknown names: own text
    del schema["properties"]["budget"]  # checked below, with texts of its own
    del schema["properties"]["fork_turns"]
    del schema["properties"]["output_schema"]
    del schema["properties"]["isolation"]
    schema["required"] = ["session_type", "prompt"]
    rest = dict(arguments)
    budget = parse_budget(rest.pop("budget", None), tool)
    fork_turns = fork_turns_of(rest.pop("fork_turns", None), tool)
    output_schema = check_schema(rest.pop("output_schema", None), tool)
    isolation = isolation_of(rest.pop("isolation", None), tool)
    check_arguments(tool, schema, rest)
    if rest["session_type"] not in profiles:
        raise UnknownSessionType(rest["session_type"], tuple(profiles))
    if not rest["prompt"].strip():
        raise InvalidArguments(tool, "prompt must not be empty")
    return await manager.spawn_child(rest["session_type"], rest["prompt"], call_id=call_id,
                                     budget=budget, fork_turns=fork_turns,
                                     output_schema=output_schema, isolation=isolation)


async def run_batch(manager: SubsessionManager, arguments: dict[str, Any], call_id: str) -> str:
    """`run_batch`: both paths inside the workspace; a refusal is a tool error
    of one line, and a bad item only fails that item."""
    profiles = manager.profiles()
    schema = batch_schema(list(profiles))
    schema["properties"]["session_type"] = {"type": "string"}  # unknown names: own text
    del schema["properties"]["budget"]
    schema["required"].remove("budget")
    for field in ("output_schema", "fork_turns"):  # checked below; may be omitted (MCP)
        del schema["properties"][field]
        schema["required"].remove(field)
    rest = dict(arguments)
    budget = parse_budget(rest.pop("budget", None), "run_batch")
    output_schema = check_schema(rest.pop("output_schema", None), "run_batch")
    fork_turns = fork_turns_of(rest.pop("fork_turns", None), "run_batch")
    check_arguments("run_batch", schema, rest)
    if rest["session_type"] not in profiles:
        raise UnknownSessionType(rest["session_type"], tuple(profiles))
    if rest["max_concurrency"] is not None and rest["max_concurrency"] < 1:
        raise InvalidArguments("run_batch", "max_concurrency must be at least 1 (or null)")
    result = await manager.run_batch(
        rest["session_type"], rest["input_path"], rest["prompt"], rest["output_path"],
        16 if rest["max_concurrency"] is None else rest["max_concurrency"], budget,
        inside_workspace=True, call_id=call_id, output_schema=output_schema,
        fork_turns=fork_turns)
    return _dump(result.as_dict())


def list_sessions(manager: SubsessionManager) -> dict[str, Any]:
    """`list_sessions`: every child of this session, oldest first."""
    return {"sessions": [info.listing() for info in manager.children()]}


def _timeout_seconds(arguments: dict[str, Any]) -> float:
    """`timeout_ms` in seconds; the hour's clamp is applied where every wait is."""
    return int(arguments["timeout_ms"]) / 1000


async def _wait_sessions(manager: SubsessionManager, arguments: dict[str, Any]) -> str:
    ids: list[str] = arguments["session_ids"]
    if not ids:
        raise InvalidArguments("wait_sessions", "session_ids must not be empty")
    seconds = _timeout_seconds(arguments)
    if arguments["mode"] == "any":
        waited = await manager.wait_any(ids, seconds)
    else:
        waited = await manager.wait_all(ids, seconds)
    results: dict[str, Any] = {cid: info.outcome() for cid, info in waited.children.items()}
    for unknown in waited.unknown:
        results[unknown] = {"status": "unknown", "error": f"unknown session {echo(unknown)}"}
    return _dump({"results": results, "timed_out": waited.timed_out})


@define
class RunPlan:
    """A checked `run_sessions` call: what to run, how, and for how long at most."""

    mode: Literal["parallel", "chain"]
    tasks: list[waits.RunTask]
    seconds: float


def _run_task(task: dict[str, Any]) -> waits.RunTask:
    """One `run_sessions` task: its profile and prompt, and its spawn options if any."""
    options = {"fork_turns": fork_turns_of(task.get("fork_turns"), "run_sessions"),
               "output_schema": check_schema(task.get("output_schema"), "run_sessions")}
    if any(v is not None for v in options.values()):
        return (task["session_type"], task["prompt"], options)
    return (task["session_type"], task["prompt"])


def parse_run(manager: SubsessionManager, arguments: dict[str, Any]) -> RunPlan:
    """`run_sessions` arguments checked (the tools' errors raised) before anything starts."""
    profiles = manager.profiles()
    schema = run_schema(list(profiles))
    item = schema["properties"]["tasks"]["items"]
    item["properties"]["session_type"] = {"type": "string"}
    item["required"] = ["session_type", "prompt"]  # the new fields may be omitted (MCP)
    check_arguments("run_sessions", schema, arguments)
    tasks: list[waits.RunTask] = [_run_task(t) for t in arguments["tasks"]]
    if not tasks:
        raise InvalidArguments("run_sessions", "tasks must not be empty")
    for kind, prompt, *_ in tasks:
        if kind not in profiles:
            raise UnknownSessionType(str(kind), tuple(profiles))
        if not prompt.strip():
            raise InvalidArguments("run_sessions", "every prompt must be non-empty")
    return RunPlan(arguments["mode"], tasks, _timeout_seconds(arguments))


async def run_plan(plan: RunPlan, spawner: Spawner, call_id: str) -> str:
    """Run a checked plan, its children spawned through `spawner`; every step's outcome."""
    runner = waits.run_parallel if plan.mode == "parallel" else waits.run_chain
    run = await runner(spawner, plan.tasks, plan.seconds, call_id=call_id)
    body: dict[str, Any] = {
        "mode": plan.mode,
        "results": [step.outcome() for step in run.steps],
        "timed_out": run.timed_out,
    }
    if run.failed_step is not None:
        failed = run.steps[run.failed_step].outcome()
        body["failed_step"] = run.failed_step
        kind = plan.tasks[run.failed_step][0]
        body["error"] = (
            f"step {run.failed_step} ({kind if isinstance(kind, str) else kind.name}) "
            f"{'timed out' if run.timed_out else 'failed: ' + str(failed.get('error'))}"
        )
    return _dump(body)
