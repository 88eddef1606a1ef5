"""Lifecycle hooks on children (DESIGN 3.13), on both backends: the root's
`on_subagent_start` adds context to a child's first message, and `on_subagent_stop` can keep a
child working ("block", with a reason it reads) until it allows, a hook fails, or
`max_stop_blocks` is reached."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from scripting import WORKER, Script, first_prompt

from subsessions import Engine, Hooks, SessionConfig
from subsessions.testing import rollout_of


def _texts(request: Any) -> list[str]:
    return [part["text"] for item in request.items if item.get("role") == "user"
            for part in item["content"]]


async def _run(tmp_path: Path, backend: Any, hooks: Hooks, prompt: str = "work",
               **config: Any) -> tuple[Script, str, Any]:
    script = Script(route=first_prompt)
    async with Engine(tmp_path / "home", model_client=script.model, backend=backend) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                           hooks=hooks, **config))
        cid = await parent.subsessions.spawn_child("worker", prompt)
        result = await parent.subsessions.wait_child(cid, timeout=60)
        info = parent.subsessions.info(cid)
    return script, result, info


async def test_a_stop_hook_that_blocks_twice_then_allows_gives_three_turns(
    tmp_path: Path, backend: Any
) -> None:
    heard: list[dict[str, Any]] = []

    def stop(data: dict[str, Any]) -> dict[str, Any] | None:
        heard.append(data)
        if len(heard) <= 2:
            return {"decision": "block", "reason": f"check again ({len(heard)})"}
        return None

    script, result, info = await _run(tmp_path, backend, Hooks(on_subagent_stop=stop))
    assert len(script.seen["work"]) == 3 and result == "answer to work"
    assert [h["stop_hook_active"] for h in heard] == [False, True, True]
    assert {h["session_id"] for h in heard} == {info.session_id}
    assert heard[0]["agent_name"] == "worker"
    assert heard[0]["last_assistant_message"] == "answer to work"
    assert heard[0]["transcript_path"] == info.rollout_path
    assert _texts(script.seen["work"][2])[-2:] == ["check again (1)", "check again (2)"]


@pytest.mark.in_process
@pytest.mark.parametrize(("limit", "calls"), [(None, 4), (1, 2), (0, 1)])
async def test_a_hook_that_always_blocks_stops_at_max_stop_blocks(
    tmp_path: Path, limit: int | None, calls: int
) -> None:
    def stop(data: dict[str, Any]) -> dict[str, Any]:
        return {"decision": "block", "reason": "more"}

    config = {} if limit is None else {"max_stop_blocks": limit}
    script, result, _ = await _run(tmp_path, None, Hooks(on_subagent_stop=stop), **config)
    assert len(script.seen["work"]) == calls and result == "answer to work"


@pytest.mark.in_process
@pytest.mark.parametrize("answer", ["raise", {"decision": "allow"}, {"decision": "block"},
                                    "not a dict", {"decision": "block", "reason": 7}])
async def test_what_a_stop_hook_answers_besides_a_block(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, answer: Any
) -> None:
    """One that raises is logged and allows; a block without a usable reason still blocks
    (with a plain one), anything else allows."""
    def stop(data: dict[str, Any]) -> Any:
        if answer == "raise":
            raise RuntimeError("the checker broke")
        return answer

    blocks = isinstance(answer, dict) and answer.get("decision") == "block"
    with caplog.at_level(logging.ERROR, logger="subsessions"):
        script, _, _ = await _run(tmp_path, None, Hooks(on_subagent_stop=stop),
                                  max_stop_blocks=1)
    assert len(script.seen["work"]) == (2 if blocks else 1)
    if blocks:
        assert _texts(script.seen["work"][1])[-1] == "Keep working."
    if answer == "raise":
        assert "the checker broke" in caplog.text


async def test_a_start_hook_adds_context_to_the_childs_first_message(
    tmp_path: Path, backend: Any
) -> None:
    heard: list[dict[str, Any]] = []

    async def start(data: dict[str, Any]) -> dict[str, Any]:
        heard.append(data)
        return {"additional_context": "The repository is at /src."}

    script, result, info = await _run(tmp_path, backend, Hooks(on_subagent_start=start))
    [data] = heard
    assert {k: data[k] for k in ("session_id", "agent_name", "prompt", "depth")} == {
        "session_id": info.session_id, "agent_name": "worker", "prompt": "work", "depth": 1}
    assert data["parent_id"] != info.session_id
    [(routed, [request])] = script.seen.items()
    assert _texts(request) == ["work\n\nThe repository is at /src."]
    assert result == f"answer to {routed}"
    told = [r for r in rollout_of(tmp_path / "home", info.session_id).records
            if r.get("payload", {}).get("type") == "user_message"]
    assert told[0]["payload"]["message"].endswith("The repository is at /src.")
