"""`subsessions demo`: the main job, offline, on a scripted model.

A parent fans out to mathematician, tester and linter_fixer at once plus a slow
`default` child (which itself starts a grandchild), waits for the three, finds the
slow one still running, cancels it (grandchild first), and summarises. Every
child's answer is computed by its script from the prompt it was actually given.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import orjson

from subsessions.cli.demo_work import run_work_scene
from subsessions.cli.rollouts import print_tree
from subsessions.config import SessionConfig
from subsessions.engine.facade import Engine
from subsessions.models.base import ModelRequest
from subsessions.models.scripted import ScriptedModel, ScriptResponse
from subsessions.profiles import load_profiles
from subsessions.rollouts.reader import rollout_tree

PARENT_INSTRUCTIONS = "You coordinate sub-sessions to answer the user. (subsessions demo)"

TASKS = {
    "mathematician": "What is the sum of the first 100 prime numbers?",
    "tester": "Check slugify(): 'Hello World' -> 'hello-world', '  a  b ' -> 'a-b', '' -> ''.",
    "linter_fixer": "Find unused imports in: import os\nimport sys\nprint(sys.argv)",
    "default": "Survey every module of the repository and summarise its architecture.",
}
SLOW_SECONDS = 3600.0  # the `default` child's model never answers in time: it gets cancelled


def _primes(count: int) -> list[int]:
    found: list[int] = []
    candidate = 2
    while len(found) < count:
        if all(candidate % p for p in found if p * p <= candidate):
            found.append(candidate)
        candidate += 1
    return found


def _slugify(text: str) -> str:
    return "-".join(text.lower().split())


def _mathematician(prompt: str) -> str:
    count = int("".join(ch for ch in prompt.split("first")[-1] if ch.isdigit()) or "10")
    primes = _primes(count)
    return (
        f"Answer: {sum(primes)}\nThe first {count} primes run from 2 to {primes[-1]}."
    )


def _tester(prompt: str) -> str:
    cases = []
    for chunk in prompt.split(", "):
        if "->" in chunk:
            given, expected = (part.strip().strip(".'") for part in chunk.split("->"))
            cases.append((given.split("'")[-1] if "'" in given else given, expected))
    failures = [(g, e, _slugify(g)) for g, e in cases if _slugify(g) != e]
    lines = [f"{'PASS' if not failures else 'FAIL'}: {len(cases) - len(failures)} passed, "
             f"{len(failures)} failed"]
    lines += [f"- slugify({g!r}) expected {e!r}, got {a!r}" for g, e, a in failures]
    return "\n".join(lines)


def _linter_fixer(prompt: str) -> str:
    source = prompt.split(":", 1)[-1].strip().splitlines()
    imported = [line.split()[1] for line in source if line.startswith("import ")]
    body = "\n".join(line for line in source if not line.startswith("import "))
    unused = [name for name in imported if f"{name}." not in body]
    return f"{len(unused)} finding(s) fixed: removed unused import(s) {', '.join(unused)}."


def _outputs(request: ModelRequest) -> list[dict[str, Any]]:
    return [orjson.loads(i["output"]) | {"ok": i["success"]} if i["success"] else
            {"error": i["output"], "ok": False}
            for i in request.items if i["type"] == "function_call_output"]


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": arguments}


def _parent(request: ModelRequest) -> ScriptResponse:
    outputs = _outputs(request)
    turn = len(outputs)
    if turn == 0:
        return [_call("create_session", session_type=kind, prompt=prompt)
                for kind, prompt in TASKS.items()]
    ids = [o["session_id"] for o in outputs[:4]]
    if turn == 4:
        return [_call("wait_session", session_id=i, timeout_ms=30_000) for i in ids[:3]] + [
            _call("wait_session", session_id=ids[3], timeout_ms=200)
        ]
    if turn == 8:
        return [_call("cancel_session", session_id=ids[3])]
    results = outputs[4:7]
    summary = "\n".join(f"- {kind}: {(r.get('result') or r.get('error') or '').splitlines()[0]}"
                        for kind, r in zip(TASKS, results, strict=False))
    return [f"Three sub-sessions finished; the survey was cancelled.\n{summary}"]


def build_script(engine_profiles: dict[str, str]) -> Callable[[ModelRequest], Any]:
    """Route each request by the instructions its session was started with."""
    by_instructions = {text: name for name, text in engine_profiles.items()}
    answers = {"mathematician": _mathematician, "tester": _tester,
               "linter_fixer": _linter_fixer}

    async def script(request: ModelRequest) -> ScriptResponse:
        if request.instructions == PARENT_INSTRUCTIONS:
            return _parent(request)
        kind = by_instructions.get(request.instructions, "default")
        prompt = request.items[0]["content"][0]["text"]
        if kind == "default" and "create_session" in request.tool_names and not _outputs(request):
            return [_call("create_session", session_type="mathematician",
                          prompt="Estimate how many lines of code a module has on average.")]
        if kind in answers and "Estimate" not in prompt:
            await asyncio.sleep(0.05)  # a little latency, so running at once is visible
            return [answers[kind](prompt)]
        await asyncio.sleep(SLOW_SECONDS)
        return ["unreachable: cancelled before this"]

    return script


async def run_demo(home: Path, out: TextIO) -> int:
    profiles = load_profiles(home, os.getcwd())
    model = ScriptedModel(
        build_script({name: lp.profile.developer_instructions for name, lp in profiles.items()})
    )
    async with Engine(home, model_client=model, model="scripted-demo", profiles=profiles) as engine:
        parent = await engine.create_session(SessionConfig(instructions=PARENT_INSTRUCTIONS))
        out.write(f"== scene 1: fan-out, wait, cancel\nparent session {parent.session_id}\n")
        started = time.perf_counter()
        answer = await parent.send_and_wait("Answer four questions about this project.")
        elapsed = time.perf_counter() - started
        out.write(f"\nchildren (all four ran at once; whole task took {elapsed:.2f}s):\n")
        for info in parent.subsessions.children():
            text = info.result or info.error or "-"
            first = text.splitlines()[0]
            out.write(f"  {info.session_type:<13} {info.status.word:<10} {first}\n")
        out.write(f"\nparent's answer:\n{answer}\n")
    with tempfile.TemporaryDirectory(prefix="subsessions-workspace-") as workspace:
        await run_work_scene(home, Path(workspace), profiles, out)
    out.write(f"\nrollout tree ({home}):\n")
    print_tree(rollout_tree(home), out)
    return 0
