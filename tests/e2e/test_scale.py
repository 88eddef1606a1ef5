"""10,000 children at once in one process under `ulimit -n 1024` (DESIGN 4, Scale)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import asyncio, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
from subsessions import Engine, ScriptedModel, SessionConfig
from subsessions.rollouts import rollout_files

N = 10_000

async def main(home):
    gate = asyncio.Event()

    async def model(request):
        await gate.wait()  # every child is alive and mid-task at the same time
        return ["done " + request.items[0]["content"][0]["text"]]

    async with Engine(home, model_client=ScriptedModel(model)) as engine:
        parent = await engine.create_session(SessionConfig(max_children=N))
        ids = [await parent.subsessions.spawn_child("default", f"job {i}") for i in range(N)]
        while len(model_requests(engine)) < N:
            await asyncio.sleep(0.01)
        gate.set()
        results = [await parent.subsessions.wait_child(cid) for cid in ids]
    assert results == [f"done job {i}" for i in range(N)], results[:3]
    assert len(rollout_files(home)) == N + 1
    print("ok")

def model_requests(engine):
    return engine.model_client.requests

asyncio.run(main(sys.argv[1]))
"""


def test_ten_thousand_children_under_a_1024_descriptor_limit(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "home")],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
