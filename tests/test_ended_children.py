"""An ended child keeps what the API reports, not its history (issue 12, item 10).

A long-lived parent of many children whose tools print a lot must not hold every
transcript: once a child's ending is on disk, its rollout has the history, and the
parent keeps the result, error, usage, status and path.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from pathlib import Path
from typing import Any

import orjson

from subsessions import (
    ChildStatus,
    Engine,
    ModelRequest,
    ModelResponse,
    Profile,
    SessionConfig,
    TokenUsage,
    Tool,
)
from subsessions.items import assistant_message, function_call
from subsessions.rollouts import read_rollout

OUTPUT = 150_000  # characters of tool output per child
DUMPER = Profile(name="dumper", tools=("dump",))


class DumpThenAnswer:
    """A model that keeps nothing: it calls `dump`, then says how much it saw."""

    provider = "scripted"

    def __init__(self) -> None:
        self.items_seen: list[int] = []  # how many input items each request had

    async def respond(self, request: ModelRequest) -> ModelResponse:
        self.items_seen.append(len(request.items))
        last = request.items[-1]
        if last.get("type") == "function_call_output":
            text = f"saw {len(last['output'])}"
            return ModelResponse(output=(assistant_message(text),), usage=TokenUsage(7, 3))
        call = function_call("dump", "{}", f"call_{len(request.items)}")
        return ModelResponse(output=(call,), usage=TokenUsage(5, 1))


def dump(arguments: dict[str, Any], invocation: Any) -> str:
    return "x" * OUTPUT  # a new string each call, as a real tool's output would be


def config(n: int) -> SessionConfig:
    return SessionConfig(tools=(Tool("dump", "Prints a lot.", handler=dump),),
                         custom_agents=(DUMPER,), max_children=n)


async def test_a_parent_of_many_ended_children_keeps_their_results_not_their_histories(
    home: Path,
) -> None:
    n = 100
    async with Engine(home, model_client=DumpThenAnswer()) as engine:
        parent = await engine.create_session(config(n))
        manager = parent.subsessions
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            ids = [await manager.spawn_child("dumper", f"task {i}") for i in range(n)]
            results = [await manager.wait_child(cid) for cid in ids]
            for _ in range(20):  # what is still in flight elsewhere (callbacks, other threads)
                gc.collect()  # settles within moments; what the parent keeps stays
                per_child = (tracemalloc.get_traced_memory()[0] - before) / n
                if per_child < OUTPUT / 10:
                    break
                await asyncio.sleep(0.05)
        finally:
            tracemalloc.stop()
        assert results == [f"saw {OUTPUT}"] * n
        assert per_child < OUTPUT / 10, f"{per_child / 1024:.0f} KiB kept per ended child"

        # every question about them is still answered
        waited = await manager.wait_all(ids, timeout=0)
        assert not waited.timed_out
        for cid in ids:
            info = manager.info(cid)
            assert manager.status(cid) is ChildStatus.DONE
            assert info.result == f"saw {OUTPUT}"
            assert (info.usage.turns, info.usage.tool_calls) == (2, 1)
            assert (info.usage.input_tokens, info.usage.output_tokens) == (12, 4)
            assert await manager.wait_child(cid, timeout=0) == info.result
            assert waited.children[cid].result == info.result
        assert parent.usage(include_children=True).tool_calls == n

    # and the history is where it was dropped for: in each child's rollout
    outputs = [i for i in read_rollout(manager.info(ids[-1]).rollout_path).response_items()
               if i["type"] == "function_call_output"]
    assert [len(i["output"]) for i in outputs] == [OUTPUT]


async def test_an_ended_child_run_again_has_its_history_back_from_its_rollout(
    home: Path,
) -> None:
    model = DumpThenAnswer()
    async with Engine(home, model_client=model) as engine:
        parent = await engine.create_session(config(1))
        cid = await parent.subsessions.spawn_child("dumper", "first task")
        assert await parent.subsessions.wait_child(cid) == f"saw {OUTPUT}"
        assert await parent.subsessions.send_message(cid, "once more") == "started"
        assert await parent.subsessions.wait_child(cid) == f"saw {OUTPUT}"
        path = parent.subsessions.info(cid).rollout_path
    # the second task's first request held the first task's 4 items and the new prompt
    assert model.items_seen == [1, 3, 5, 7]
    texts = [orjson.dumps(i).decode() for i in read_rollout(path)
             .response_items()]
    assert sum("first task" in t for t in texts) == 1
    assert sum("once more" in t for t in texts) == 1
