"""The Ray backend beyond the shared suite (DESIGN 3.8): placement across nodes, driver-side
handlers, node loss, close with remote children running, and Ray imported only when asked.

The cluster (conftest `ray_cluster`) is a head and two worker nodes on 127.0.0.1; shards go
to the worker nodes, one each. Node loss removes a worker node from the cluster mid-run.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from fake_openai import fake_openai
from ray_support import engine, script
from scripting import (
    WORKER,
    Script,
    Watch,
    first_prompt,
    outputs,
    rollout_of,
    spawn_held,
    terminals,
    tokens,
)

from subsessions import (
    ChildFailed,
    ChildStatus,
    ConfigError,
    Engine,
    Hooks,
    Profile,
    RayBackend,
    ScriptedModel,
    Session,
    SessionConfig,
    Tool,
)
from subsessions.rollouts.reader import find_rollout, read_rollout

pytest.importorskip("ray", reason="pip install 'subsessions[ray]'")

__all__ = ["engine", "fake_openai", "script"]  # the fixtures, imported so pytest finds them

ONE_TOOL = {"type": "object", "properties": {}, "additionalProperties": False}


def _backend(engine: Engine) -> RayBackend:
    backend = engine.runtime.backend
    assert isinstance(backend, RayBackend)
    return backend


async def test_children_go_to_the_least_loaded_shard_on_both_worker_nodes(
    engine: Engine, script: Script, ray_cluster: Any
) -> None:
    parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    held = [await spawn_held(parent, script, f"held {n}") for n in range(4)]
    pool = _backend(engine).pool
    assert pool is not None
    assert [s.load for s in pool.shards] == [2, 2]
    workers = {node.node_id for node in ray_cluster.worker_nodes}
    assert {s.node_id for s in pool.shards} == workers  # one shard on each worker node
    for n in range(4):
        script.answer(f"held {n}", [f"done {n}"])
    assert [await parent.subsessions.wait_child(c) for c in held] == [
        f"done {n}" for n in range(4)]


async def test_driver_side_handlers_run_in_this_process_in_order(
    engine: Engine, script: Script
) -> None:
    seen: list[tuple[str, Any]] = []

    def tool(arguments: dict[str, Any], invocation: Any) -> str:
        seen.append(("tool", invocation.session_id))
        return "tool output"

    def pre(data: dict[str, Any]) -> dict[str, Any]:
        seen.append(("pre", data["tool_name"]))
        return {"modifiedArgs": {"x": 1}}

    def post(data: dict[str, Any]) -> dict[str, Any]:
        seen.append(("post", data["tool_args"]))
        return {"modifiedResult": data["tool_result"] + " (checked)"}

    def permission(request: dict[str, Any]) -> str:
        seen.append(("permission", request["tool_name"]))
        return "approved"

    config = SessionConfig(
        custom_agents=(WORKER,), hooks=Hooks(on_pre_tool_use=pre, on_post_tool_use=post),
        permission_handler=permission,
        tools=(Tool("probe", "probes", ONE_TOOL, tool, requires_permission=True),),
    )
    parent = await engine.create_session(config)
    script.handlers["use it"] = lambda request: (
        [{"type": "function_call", "name": "probe", "arguments": {}}]
        if len(script.seen["use it"]) == 1 else [request.items[-1]["output"]])
    cid = await parent.subsessions.spawn_child("worker", "use it")
    assert await parent.subsessions.wait_child(cid) == "tool output (checked)"
    assert seen == [("pre", "probe"), ("permission", "probe"), ("tool", cid),
                    ("post", {"x": 1})]


async def test_a_raising_host_tool_is_a_failed_output_with_its_text(
    engine: Engine, script: Script
) -> None:
    def broken(arguments: dict[str, Any], invocation: Any) -> str:
        raise ValueError("the host's tool broke")

    parent = await engine.create_session(SessionConfig(
        custom_agents=(WORKER,), tools=(Tool("broken", "breaks", ONE_TOOL, broken),)))
    script.handlers["break it"] = lambda request: (
        [{"type": "function_call", "name": "broken", "arguments": {}}]
        if len(script.seen["break it"]) == 1 else [request.items[-1]["output"]])
    cid = await parent.subsessions.spawn_child("worker", "break it")
    assert await parent.subsessions.wait_child(cid) == "the host's tool broke"


async def test_a_remote_childs_deferred_call_is_answered_by_the_driver_host(
    engine: Engine, script: Script
) -> None:
    parent = await engine.create_session(SessionConfig(
        custom_agents=(WORKER,), tools=(Tool("later", "answered later", ONE_TOOL),)))
    answered: list[str] = []

    def on_event(event: Any) -> None:
        if event.type == "external_tool.requested":
            answered.append(event.data["session_id"])
            parent.handle_pending_tool_call(event.data["request_id"], result={"ok": True})

    parent.on(on_event)
    script.handlers["defer"] = lambda request: (
        [{"type": "function_call", "name": "later", "arguments": {}}]
        if len(script.seen["defer"]) == 1 else [request.items[-1]["output"]])
    cid = await parent.subsessions.spawn_child("worker", "defer")
    assert await parent.subsessions.wait_child(cid) == '{"ok":true}'
    assert answered == [cid]


async def test_remote_events_reach_the_parent_with_the_spawning_call(
    engine: Engine, script: Script
) -> None:
    parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    watch = Watch()
    parent.on(watch)
    cid = await parent.subsessions.spawn_child("worker", "talk", call_id="call_talk")
    await parent.subsessions.wait_child(cid)
    mine = [e for e in watch.events if e.session_id == cid]
    assert [e.type for e in mine] == ["session.start", "assistant.message", "subagent.usage",
                                      "session.idle"]
    assert {e.data["parent_tool_call_id"] for e in mine} == {"call_talk"}
    [usage] = [e.data for e in mine if e.type == "subagent.usage"]  # the live meter travels
    assert usage["remote_session_id"] == cid and usage["turns"] == 1
    assert [e.type for e in watch.endings(cid)] == ["subagent.completed"]


async def test_a_running_remote_childs_listing_shows_its_usage_and_last_message_so_far(
    engine: Engine, script: Script
) -> None:
    second = asyncio.Event()
    gate: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def step(request: Any) -> Any:
        if len(script.seen["step"]) == 1:
            return ["half way", {"type": "function_call", "name": "noop", "arguments": {}},
                    tokens(30, 12)]
        second.set()
        return await gate

    script.handlers["step"] = step
    noop = Tool("noop", "does nothing", ONE_TOOL, lambda arguments, invocation: "ok")
    parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,), tools=(noop,)))
    manager = parent.subsessions
    cid = await manager.spawn_child("worker", "step")
    await asyncio.wait_for(second.wait(), 30)  # what it sent before this call has been seen
    [listed] = [info.listing() for info in manager.children()]
    assert listed["status"] == "running" and listed["last_message"] == "half way"
    # as in process: the call in flight counts as a turn, the tool it ran before it counts
    assert listed["usage"] == {"input_tokens": 30, "output_tokens": 12, "total_tokens": 42,
                               "turns": 2, "tool_calls": 1}
    gate.set_result(["all done", tokens(1, 1)])
    assert await manager.wait_child(cid) == "all done"
    assert manager.info(cid).usage.as_dict() == {
        "input_tokens": 31, "output_tokens": 13, "total_tokens": 44, "turns": 2,
        "tool_calls": 1}


async def test_a_message_sent_before_a_shard_took_the_child_is_read_there(
    engine: Engine, script: Script
) -> None:
    parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    manager = parent.subsessions
    cid = await manager.spawn_child("worker", "first")  # the shards are still starting
    assert await manager.send_message(cid, "and then this") == "queued"
    assert await manager.wait_child(cid) == "answer to first"
    [request] = script.seen["first"]
    texts = [i["content"][0]["text"] for i in request.items if i.get("role") == "user"]
    assert texts == ["first", "and then this"]


async def test_losing_a_node_fails_its_children_once_and_the_engine_goes_on(
    home: Path, script: Script, ray_cluster: Any
) -> None:
    """Its own cluster node: removing one of the shared worker nodes would starve the rest."""
    from ray_support import SHARD_OPTIONS, add_worker

    node = add_worker(ray_cluster, {"doomed": 1})
    options = {**SHARD_OPTIONS, "resources": {"doomed": 0.01}}
    backend = RayBackend(shards=1, model_on_driver=True, actor_options=options)
    try:
        async with Engine(home, model_client=script.model, backend=backend) as engine:
            parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
            watch = Watch()
            parent.on(watch)
            held = [await spawn_held(parent, script, f"lost {n}") for n in range(2)]
            pool = backend.pool
            assert pool is not None and pool.shards[0].node_id == node.node_id
            ray_cluster.remove_node(node, allow_graceful=False)
            for cid in held:
                with pytest.raises(ChildFailed) as failed:
                    await parent.subsessions.wait_child(cid, timeout=60)
                assert failed.value.error.startswith("worker lost: shard 0 on node ")
                assert parent.subsessions.status(cid) is ChildStatus.FAILED
                assert len(watch.endings(cid)) == 1
                # its own rollout has no ending: a reader lists it as interrupted
                assert read_rollout(find_rollout(home, cid)).status == "interrupted"
            # no live shard is left: a new child fails the same way, the engine still serves
            cid = await parent.subsessions.spawn_child("worker", "after")
            with pytest.raises(ChildFailed, match="worker lost: no live shard is left"):
                await parent.subsessions.wait_child(cid, timeout=60)
            assert await parent.send_and_wait("the parent goes on") == (
                "answer to the parent goes on")
    finally:
        script.cancelled.clear()
    parent_events = [e["message"] for e in _events(rollout_of(home, parent.session_id))]
    assert sum(f"{c} failed: worker lost: shard 0" in m for m in parent_events
               for c in held) == 2


async def test_new_children_go_to_live_shards_after_a_shard_dies(
    engine: Engine, script: Script
) -> None:
    import ray

    parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    first = await spawn_held(parent, script, "on the first shard")
    pool = _backend(engine).pool
    assert pool is not None
    doomed = next(s for s in pool.shards if s.load == 1)
    ray.kill(doomed.actor, no_restart=True)
    with pytest.raises(ChildFailed, match="worker lost: shard "):
        await parent.subsessions.wait_child(first, timeout=60)
    later = [await parent.subsessions.spawn_child("worker", f"later {n}") for n in range(3)]
    assert [await parent.subsessions.wait_child(c, timeout=60) for c in later] == [
        f"answer to later {n}" for n in range(3)]
    assert [s.alive for s in pool.shards].count(True) == 1


async def test_close_with_remote_children_running_ends_each_once(
    home: Path, script: Script, ray_cluster: Any
) -> None:
    from ray_support import SHARD_OPTIONS

    backend = RayBackend(shards=2, model_on_driver=True, actor_options=SHARD_OPTIONS)
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        parent: Session = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        await parent.subsessions.wait_child(await parent.subsessions.spawn_child("worker", "w"))
        held = [await spawn_held(parent, script, f"running {n}") for n in range(3)]
    assert sorted(script.cancelled) == [f"running {n}" for n in range(3)]
    for cid in held:
        assert terminals(rollout_of(home, cid)) == [
            {"type": "turn_aborted", "reason": "cancelled"}]
    pool = backend.pool
    assert pool is not None and all(s.pump is not None and s.pump.done() for s in pool.shards)


def _events(rollout: Any) -> list[dict[str, Any]]:
    return [r["payload"] for r in rollout.records if r["type"] == "event_msg"
            and r["payload"]["type"] == "background_event"]


# -- configuration, and Ray only when asked -------------------------------------------------
@pytest.mark.parametrize(("kwargs", "text"), [
    ({"shards": 0}, "RayBackend: shards: must be an integer of at least 1, not 0"),
    ({"shards": True}, "RayBackend: shards: must be an integer of at least 1, not True"),
    ({"per_shard": -5}, "RayBackend: per_shard: must be an integer of at least 1, not -5"),
    ({"address": ""}, "RayBackend: address: must be None"),
    ({"address": 7}, "RayBackend: address: must be None"),
])
def test_malformed_backend_settings_are_one_clear_error(kwargs: dict[str, Any],
                                                        text: str) -> None:
    with pytest.raises(ConfigError) as error:
        RayBackend(**kwargs)
    assert str(error.value).startswith(text)


class LockedModel(ScriptedModel):
    """A client holding a lock: it cannot be pickled, so it cannot travel to a shard."""

    def __init__(self) -> None:
        super().__init__(["never"])
        self.lock = threading.Lock()


async def test_a_model_client_that_cannot_travel_is_named(home: Path, ray_cluster: Any) -> None:
    async with Engine(home, model_client=LockedModel(), backend=RayBackend(shards=1)) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        cid = await parent.subsessions.spawn_child("worker", "x")
        with pytest.raises(ChildFailed, match="the model client cannot be sent to shards"):
            await parent.subsessions.wait_child(cid)


def test_ray_is_imported_only_when_asked_for() -> None:
    code = ("import sys, subsessions, subsessions.cli, subsessions.engine; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_asking_for_ray_without_the_extra_is_one_line(tmp_path: Path) -> None:
    # a Python where `ray` cannot be found, as without the extra
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['ray'] = None\n")
    code = ("from subsessions import RayBackend\ntry:\n    RayBackend()\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin"})
    assert out.stdout.strip() == (
        "ConfigError RayBackend: ray: the Ray backend needs Ray: pip install 'subsessions[ray]'")


async def test_asyncio_tasks_of_the_backend_are_gone_after_close(
    home: Path, script: Script, ray_cluster: Any
) -> None:
    from ray_support import SHARD_OPTIONS

    backend = RayBackend(shards=1, model_on_driver=True, actor_options=SHARD_OPTIONS)
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        await parent.subsessions.wait_child(await parent.subsessions.spawn_child("worker", "y"))
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert left == []


@pytest.mark.parametrize("command", [["run", "hello"], ["serve", "--stdio"],
                                     ["batch", "in.csv", "--prompt", "Describe {city}",
                                      "--profile", "default", "--out", "out.jsonl"]],
                         ids=["run", "serve", "batch"])
def test_the_ray_flag_without_the_extra_is_one_line(tmp_path: Path, command: list[str]) -> None:
    """Every command builds its engine the one way (`engine.from_settings`): `serve` once
    ignored `--ray` and `[ray]` silently, and ran every child in process."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['ray'] = None\n")
    (tmp_path / "in.csv").write_text("city\nParis\n")
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin",
           "SUBSESSIONS_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-m", "subsessions", *command, "--ray", "auto",
                          "--base-url", "http://127.0.0.1:9/v1"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert out.returncode != 0
    told = out.stderr.strip().splitlines()
    if command[0] == "batch":  # its journal's line comes first: `--resume` can retry it
        assert told.pop(0).startswith("subsessions batch ")
    assert told == [
        "subsessions: --ray: ray: the Ray backend needs Ray: pip install 'subsessions[ray]'"]


@pytest.mark.parametrize("pause", [0.0, 0.05], ids=["before-it-ran", "while-shards-start"])
async def test_a_child_cancelled_before_a_shard_took_it_ends_once_as_cancelled(
    home: Path, script: Script, ray_cluster: Any, pause: float
) -> None:
    from ray_support import SHARD_OPTIONS

    backend = RayBackend(shards=1, model_on_driver=True, actor_options=SHARD_OPTIONS)
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        cid = await parent.subsessions.spawn_child("worker", "too late")
        if pause:
            await asyncio.sleep(pause)  # its task waits for the shards to start
        assert await parent.subsessions.cancel_child(cid) is True
        assert parent.subsessions.status(cid) is ChildStatus.CANCELLED
    assert terminals(rollout_of(home, cid)) == [{"type": "turn_aborted", "reason": "cancelled"}]
    assert script.seen["too late"] == []  # its model was never asked


async def _run_with_ray(fake_openai: Any, tmp_path: Path, ray_cluster: Any,
                        worker: Any) -> tuple[str, str, Path]:
    """`subsessions run --ray auto` as a user runs it: a process that joins the cluster
    named by RAY_ADDRESS, whose shard builds its own client to the (loopback) provider
    from the run's settings. The parent spawns a worker (answered by `worker`), waits for
    it and says what it got. Returns its stdout, stderr and home."""
    import json

    from fake_openai import call, calls, text
    from openai_support import TIMEOUT, cli_env, tool_outputs

    def script(request: Any) -> Any:
        if "You are a worker." in json.dumps(request.body):
            return worker(request)
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "worker", "prompt": "6 * 7?"}))
        if len(done) == 1:
            child = json.loads(done[0])["session_id"]
            return calls(call("wait_session", {"session_id": child, "timeout_ms": 20_000}))
        waited = done[1]  # the result, or what the failure says
        with contextlib.suppress(ValueError):
            waited = json.loads(waited)["result"]
        return text(f"The answer is {waited}")

    fake_openai.script = script
    home = tmp_path / "home"
    (home / "profiles").mkdir(parents=True)
    (home / "profiles" / "worker.toml").write_text(
        'name = "worker"\ndescription = "works"\ndeveloper_instructions = "You are a worker."\n')
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subsessions", "run", "--home", str(home), "--base-url",
        fake_openai.base_url, "--ray", "auto", "What is 6 * 7?", cwd=tmp_path,
        env={**cli_env(), "RAY_ADDRESS": ray_cluster.address},
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 3 * TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode()
    return out.decode(), err.decode(), home


async def test_run_with_ray_auto_runs_the_child_on_a_shard_of_the_running_cluster(
    fake_openai: Any, tmp_path: Path, ray_cluster: Any
) -> None:
    from fake_openai import text
    from openai_support import rollouts

    out, _, home = await _run_with_ray(fake_openai, tmp_path, ray_cluster,
                                       lambda request: text("42, from a shard"))
    assert out == "The answer is 42, from a shard\n"
    found = rollouts(home)
    assert len(found) == 2
    [child] = [r for r in found.values() if r[0]["payload"]["source"] != "cli"]
    assert child[0]["payload"]["session_type"] == "worker"


def _shard_processes(cluster: Any) -> set[int]:
    """The pids of `cluster`'s shard actors: processes Ray names `ray::Shard...` whose parent
    is one of its raylets. Shards of other clusters on this machine (other test runs) are
    not ours to kill."""
    raylets = {str(info.process.pid) for node in cluster.list_all_nodes()
               for info in node.all_processes.get("raylet", ())}
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if not (entry / "cmdline").read_bytes().startswith(b"ray::Shard"):
                    continue
                status = (entry / "status").read_text().splitlines()
            except OSError:
                continue
            parent = next((line.split()[1] for line in status if line.startswith("PPid:")), "")
            if parent in raylets:
                found.add(int(entry.name))
    return found


async def test_run_with_ray_prints_only_its_answer_when_its_shard_dies_mid_run(
    fake_openai: Any, tmp_path: Path, ray_cluster: Any
) -> None:
    """The shard running the worker dies while the worker waits for its model: the driver's
    Ray reports the dead worker, on stderr; stdout carries the answer alone."""
    import os
    import signal

    from fake_openai import text

    before = _shard_processes(ray_cluster)
    killed: list[int] = []

    def worker(request: Any) -> Any:
        for pid in _shard_processes(ray_cluster) - before:  # the run's shards (one per node)
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        return text("never heard")

    out, err, _ = await _run_with_ray(fake_openai, tmp_path, ray_cluster, worker)
    assert killed
    [answer] = out.splitlines(keepends=True)
    assert answer.startswith("The answer is ") and answer.endswith("\n")
    assert " failed: worker lost: shard " in answer
    assert "ray (raylet): A worker died or was killed" in err


async def test_grandchildren_starting_on_two_shards_never_overshoot_the_trees_limit(
    engine: Engine, script: Script
) -> None:
    """Two remote children on two shards each spawn two grandchildren at once, with room
    for one more in the tree: the driver admits each start, so exactly one is started."""
    both, answered = asyncio.Event(), asyncio.Event()
    nester = Profile(name="nester")

    async def spawns_two(request: Any) -> Any:
        if len(script.seen[first_prompt(request)]) > 1:
            # neither ends (and gives its place back, its grandchild's too) before both
            # shards' spawns were answered
            if len(script.seen["a"]) > 1 and len(script.seen["b"]) > 1:
                answered.set()
            await asyncio.wait_for(answered.wait(), 30)
            return ["spawned"]
        if len(script.seen["a"]) and len(script.seen["b"]):
            both.set()
        await asyncio.wait_for(both.wait(), 30)
        return [{"type": "function_call", "name": "create_session",
                 "arguments": {"session_type": "nester", "prompt": f"g{n}"}} for n in (1, 2)]

    script.handlers["a"] = script.handlers["b"] = spawns_two
    for n in (1, 2):
        script.hold(f"g{n}")
    parent = await engine.create_session(SessionConfig(custom_agents=(nester,),
                                                       max_depth=2, max_children=3))
    manager = parent.subsessions
    kids = [await manager.spawn_child("nester", p) for p in ("a", "b")]
    await script.started("a", "b")
    pool = _backend(engine).pool
    assert pool is not None and [s.load for s in pool.shards] == [1, 1]  # one on each shard
    await asyncio.gather(*(manager.wait_child(c, timeout=60) for c in kids))
    outs = [o for p in ("a", "b") for o in outputs(script.seen[p][1])]
    refused = [o for o in outs if "sub-session limit reached (max_children=3)" in o["output"]]
    assert (len(outs), len(refused)) == (4, 3), outs  # one started: 2 children + 1 = the limit


async def test_a_remote_childs_clock_counts_from_its_spawn_not_from_when_a_shard_took_it(
    home: Path, script: Script, ray_cluster: Any
) -> None:
    """Its shard cannot start until a node with `late` joins, after its time is up: once
    there, it ends at once, rather than a whole `max_seconds` later."""
    import time

    from ray_support import SHARD_OPTIONS, add_worker

    from subsessions import Budget

    script.hold("in time?")
    options = {**SHARD_OPTIONS, "resources": {"late": 0.01}}
    backend = RayBackend(shards=1, model_on_driver=True, actor_options=options)
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        cid = await parent.subsessions.spawn_child("worker", "in time?",
                                                   budget=Budget(max_seconds=1.0))
        spawned = time.monotonic()
        await asyncio.sleep(1.5)
        node = add_worker(ray_cluster, {"late": 1})
        try:
            with pytest.raises(ChildFailed, match=r"seconds limit 1 reached"):
                await parent.subsessions.wait_child(cid, timeout=60)
            assert time.monotonic() - spawned >= 1.5
        finally:
            ray_cluster.remove_node(node)
    records = rollout_of(home, cid).records
    began = next(r for r in records if r["type"] == "turn_context")
    ended = records[-1]
    assert ended["payload"]["type"] == "turn_aborted"
    assert _seconds(ended) - _seconds(began) < 0.6  # not the whole second again


def _seconds(record: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00")).timestamp()


async def test_a_follow_up_runs_on_its_childs_shard_or_on_a_live_one_once_that_is_gone(
    engine: Engine, script: Script
) -> None:
    """send_message to an ended remote child: its next task runs on the shard it ran on
    (not the least loaded), with its history read there from its rollout; once that shard
    is gone, on a live one."""
    import ray

    gate: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def work(request: Any) -> Any:
        return ["first answer"] if len(script.seen["work"]) == 1 else await gate

    script.handlers["work"] = work
    parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
    manager = parent.subsessions
    other = await spawn_held(parent, script, "elsewhere")  # on shard 0: `work` goes to 1
    cid = await manager.spawn_child("worker", "work")
    assert await manager.wait_child(cid) == "first answer"
    script.answer("elsewhere", ["done"])
    await manager.wait_child(other)
    pool = _backend(engine).pool
    assert pool is not None
    assert await manager.send_message(cid, "more") == "started"
    await asyncio.wait_for(_until(lambda: len(script.seen["work"]) == 2), 30)
    assert [s.load for s in pool.shards] == [0, 1]  # its shard, though both are idle
    gate.set_result(["second answer"])
    assert await manager.wait_child(cid) == "second answer"
    ray.kill(pool.shards[1].actor, no_restart=True)
    await asyncio.wait_for(_until(lambda: not pool.shards[1].alive), 30)
    assert await manager.send_message(cid, "again") == "started"
    assert await manager.wait_child(cid, timeout=60) == "second answer"  # the same gate
    third = script.seen["work"][2]
    assert [i["content"][0]["text"] for i in third.items if i.get("role") == "user"] == [
        "work", "more", "again"]
    assert manager.info(cid).usage.turns == 3
    assert len(terminals(rollout_of(engine.runtime.home, cid))) == 3


async def _until(condition: Any) -> None:
    while not condition():  # noqa: ASYNC110
        await asyncio.sleep(0.02)


async def test_a_spawn_failing_on_a_shard_gives_back_what_the_driver_admitted(
    home: Path, script: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard's side of a tree (its stand-in's tree keeping a `DriverLedger`) spawning
    against the driver's real admission (`Answerer`), joined by their real channel in this
    process: a spawn that fails once the driver counted it gives its place back, so spawns
    up to the limit still start."""
    from types import SimpleNamespace

    from subsessions import ChildLimitReached
    from subsessions.ray.channel import Channel
    from subsessions.ray.host import Answerer
    from subsessions.ray.ledger import DriverLedger

    async with Engine(home, model_client=script.model) as engine:
        config = SessionConfig(custom_agents=(WORKER,), max_children=2)
        root = await engine.create_session(config)
        channel = Channel()
        shard = SimpleNamespace(index=0, replies=SimpleNamespace(
            put=lambda request_id, ok, value, what="": channel.answer(request_id, ok, value)))
        answerer = Answerer(engine.runtime, {})

        async def pump() -> None:
            while True:
                answerer.receive(shard, await channel.outbox.get())

        stand_in = Session.stand_in(engine.runtime, config, root.session_id,
                                    DriverLedger(channel, root.session_id))
        pumping = asyncio.get_running_loop().create_task(pump())
        real = Session.new_child

        def broken(*args: Any, **kwargs: Any) -> Any:
            monkeypatch.setattr(Session, "new_child", real)  # fails once
            raise OSError("no room on this disk")

        try:
            monkeypatch.setattr(Session, "new_child", broken)
            with pytest.raises(OSError, match="no room on this disk"):
                await stand_in.subsessions.spawn_child("worker", "fails")
            await asyncio.sleep(0.05)  # the pump hands the driver what the shard sent
            assert root.tree.running == 0
            held = [await spawn_held(stand_in, script, f"held {n}") for n in range(2)]
            assert root.tree.running == 2
            with pytest.raises(ChildLimitReached):
                await stand_in.subsessions.spawn_child("worker", "one too many")
            for n, cid in enumerate(held):
                script.answer(f"held {n}", ["done"])
                await stand_in.subsessions.wait_child(cid)
            await asyncio.sleep(0.05)
            assert root.tree.running == 0
        finally:
            pumping.cancel()
            await asyncio.wait((pumping,))


async def test_a_child_that_cannot_be_sent_to_a_shard_fails_and_leaves_no_load(
    engine: Engine, script: Script
) -> None:
    """A host tool whose definition holds what cannot be pickled: the child fails with the
    reason, and its shard counts no child that never reached it."""
    odd = Tool("odd", "holds a lock", {**ONE_TOOL, "x-lock": threading.Lock()},
               lambda arguments, invocation: "ok")
    parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,), tools=(odd,)))
    cid = await parent.subsessions.spawn_child("worker", "never sent")
    with pytest.raises(ChildFailed, match="lock"):
        await parent.subsessions.wait_child(cid, timeout=60)
    pool = _backend(engine).pool
    assert pool is not None and [s.load for s in pool.shards] == [0, 0]
    assert script.seen["never sent"] == []


async def test_a_shard_the_cluster_has_no_room_for_does_not_hold_the_engine_back(
    home: Path, script: Script, ray_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three shards asked for, room for two (each takes 0.6 of a worker node's `shard`): the
    engine starts on the two (Ray keeps the third pending) and its children run there.
    (The grace the others get once one has started is cut from 30 s to 8.)"""
    from subsessions.ray import placement

    monkeypatch.setattr(placement, "START_GRACE", 8.0)
    options = {"num_cpus": 0, "resources": {"shard": 0.6}}
    backend = RayBackend(shards=3, model_on_driver=True, actor_options=options)
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        cid = await parent.subsessions.spawn_child("worker", "room?")
        assert await parent.subsessions.wait_child(cid, timeout=60) == "answer to room?"
        pool = backend.pool
        assert pool is not None
        assert sorted(s.ready for s in pool.shards) == [False, True, True]


async def test_by_default_a_shard_starts_on_each_node_that_can_hold_one(
    home: Path, script: Script, ray_cluster: Any
) -> None:
    """The head has no `shard` resource: two worker nodes, two shards (not one per node)."""
    from ray_support import SHARD_OPTIONS

    backend = RayBackend(model_on_driver=True, actor_options=SHARD_OPTIONS)
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        cid = await parent.subsessions.spawn_child("worker", "count")
        assert await parent.subsessions.wait_child(cid, timeout=60) == "answer to count"
        pool = backend.pool
        assert pool is not None
        workers = {node.node_id for node in ray_cluster.worker_nodes}
        assert sorted(s.node_id for s in pool.shards) == sorted(workers)
