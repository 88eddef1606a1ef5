"""`subsessions a2a` driven by the official JavaScript SDK, `@a2a-js/sdk` (installed with npm
into ~/.cache/subsessions-tests; skipped where node or npm is absent): send, stream with the
children and usage, follow-up, input-required, cancel with children, another caller's task,
no token, and the SDK's v0.3 names (tests/a2a_js_client.mjs)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from a2a_support import QUESTION, Model, a2a_server, ending, eventually_ends, state
from fake_openai import FakeOpenAI, fake_openai
from npm_cache import library
from openai_support import cli_env

__all__ = ["fake_openai"]
SDK = "@a2a-js/sdk@1.3.0"
CLIENT = Path(__file__).with_name("a2a_js_client.mjs")


@pytest.fixture(scope="module")
def a2a_js() -> Path:
    """A directory where `import "@a2a-js/sdk/client"` resolves (installed once, cached)."""
    return library(SDK, "a2a-js-sdk-1.3.0", "@a2a-js/sdk")


async def test_the_javascript_sdk_drives_every_path(
    a2a_js: Path, home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    model = Model()
    model.gate("child work held")  # the cancelled task's child never answers
    fake_openai.script = model
    client = a2a_js / CLIENT.name
    client.write_text(CLIENT.read_text())
    env = {k: v for k, v in cli_env().items() if not k.startswith("NODE_")}
    async with a2a_server(home, fake_openai, tmp_path, "--auth-token-env", "A2A_TOKENS",
                          env={"A2A_TOKENS": "alice,bob"}) as served:
        proc = await asyncio.create_subprocess_exec(
            "node", str(client), served.url, cwd=a2a_js, env={**env, "PWD": os.fspath(a2a_js)},
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 90)
        assert proc.returncode == 0, err.decode()[-3000:]
        seen = json.loads(out.decode().strip().splitlines()[-1])
        cancelled = seen["cancelled"]
        await eventually_ends(home, cancelled["contextId"], "turn_aborted")
        await eventually_ends(home, cancelled["child"], "turn_aborted")
    sent = seen["sent"]
    assert sent["state"] == state("completed")
    assert sent["said"] == sent["artifact"] == "hello: answered (1 user messages seen)"
    stream = seen["stream"]
    assert stream["first"] == "task" and stream["states"][-1] == state("completed")
    assert [c.split()[0] for c in stream["children"]] == ["subagent.started",
                                                          "subagent.completed"]
    assert stream["usage"] and stream["usage"][-1] == 60
    assert stream["said"] == "parent saw: child work: answered (1 user messages seen)"
    assert seen["followUp"] == {"contextId": sent["contextId"],
                                "said": "again: answered (2 user messages seen)"}
    assert seen["ask"] == {"state": state("input-required"), "question": QUESTION,
                           "answered": state("completed"), "said": "colour is blue"}
    assert cancelled["state"] == cancelled["streamEnd"] == state("canceled")
    assert ending(home, cancelled["contextId"])["cancelled_by"] == "host"
    assert ending(home, cancelled["child"])["cancelled_by"] == "parent"
    bob = seen["bob"]
    for refused in (bob["get"], bob["cancel"], bob["send"]):
        assert "not found" in refused.lower(), bob
    assert bob["listed"] == 0
    assert "401" in seen["nobody"], seen["nobody"]
    assert seen["legacy"] == {"state": state("completed"),
                              "said": "legacy hello: answered (1 user messages seen)"}
