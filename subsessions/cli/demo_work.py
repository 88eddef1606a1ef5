"""The demo's second scene: scripted children doing real work with the built-in tools.

A tester runs the real test suite of a tiny sample package, and a linter_fixer runs a
real linter, removes the finding with `apply_patch`, and runs the linter again. The
models are scripted; every output shown comes from the real processes and files.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any, TextIO

import orjson

from subsessions.config import SessionConfig
from subsessions.engine.facade import Engine
from subsessions.models.base import ModelRequest
from subsessions.models.scripted import ScriptedModel, ScriptResponse
from subsessions.profiles import LoadedProfile

PARENT = "You coordinate a tester and a linter_fixer on the sample package. (demo, scene 2)"

SAMPLE = {
    "calc/__init__.py": "import os\n\n\ndef add(a, b):\n    return a + b\n",
    "tests/__init__.py": "",
    "tests/test_calc.py": (
        "import unittest\n\nfrom calc import add\n\n\n"
        "class AddTest(unittest.TestCase):\n"
        "    def test_adds(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
        "    def test_negatives(self):\n        self.assertEqual(add(-2, -3), -5)\n"
    ),
    "lint.py": (
        '"""A tiny linter: unused imports (used when ruff is not installed)."""\n'
        "import ast\nimport sys\n\nfound = 0\n"
        "for path in sys.argv[1:]:\n"
        "    tree = ast.parse(open(path).read())\n"
        "    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}\n"
        "    for node in ast.walk(tree):\n"
        "        if isinstance(node, ast.Import):\n"
        "            for alias in node.names:\n"
        "                if alias.name not in names:\n"
        "                    print(f'{path}:{node.lineno}: unused import {alias.name}')\n"
        "                    found += 1\n"
        "print(f'{found} finding(s)')\n"
        "sys.exit(1 if found else 0)\n"
    ),
}

PATCH = """*** Begin Patch
*** Update File: calc/__init__.py
@@
-import os
-
-
 def add(a, b):
*** End Patch"""


def test_command() -> list[str]:
    """pytest when it is installed, else the standard library's unittest. The sample needs
    no plugin: those installed beside it (some import for seconds, or warn) are not loaded."""
    if importlib.util.find_spec("pytest") is not None:
        return ["env", "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1", sys.executable, "-m", "pytest",
                "-q", "-p", "no:cacheprovider", "tests"]
    return [sys.executable, "-m", "unittest", "-v"]


def lint_command() -> list[str]:
    """ruff when it is installed, else the sample's own unused-import checker."""
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff", "check", "--no-cache", "calc"]
    return [sys.executable, "lint.py", "calc/__init__.py"]


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": arguments}


def _outputs(request: ModelRequest) -> list[str]:
    return [str(i["output"]) for i in request.items if i["type"] == "function_call_output"]


def _shell_text(output: str) -> str:
    try:
        return str(orjson.loads(output)["output"]).strip()
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return output.strip()  # a failed call: the error text itself


def build_script(profiles: dict[str, LoadedProfile]) -> Any:
    tester = profiles["tester"].profile.developer_instructions
    fixer = profiles["linter_fixer"].profile.developer_instructions

    def script(request: ModelRequest) -> ScriptResponse:
        outs = _outputs(request)
        if request.instructions == PARENT:
            if not outs:
                return [_call("create_session", session_type="tester",
                              prompt="Run the sample package's tests and report."),
                        _call("create_session", session_type="linter_fixer",
                              prompt="Run the linter on calc/ and fix what it finds.")]
            if len(outs) == 2:
                ids = [orjson.loads(o)["session_id"] for o in outs]
                return [_call("wait_session", session_id=i, timeout_ms=120_000) for i in ids]
            return ["Both sub-sessions reported back (see above)."]
        if request.instructions == tester:
            if not outs:
                return [_call("shell", command=test_command(), timeout_ms=60_000)]
            return [f"Test run output:\n{_shell_text(outs[0])}"]
        if request.instructions == fixer:
            steps = [
                lambda: [_call("shell", command=lint_command())],
                lambda: [_call("apply_patch", patch=PATCH)],
                lambda: [_call("shell", command=lint_command())],
            ]
            if len(outs) < len(steps):
                return steps[len(outs)]()
            before, patched, after = (_shell_text(o) for o in outs)
            return [f"Linter before:\n{before}\n\napply_patch: {patched}\n"
                    f"Linter after:\n{after}"]
        return ["(not part of this scene)"]

    return script


async def run_work_scene(home: Path, workspace: Path, profiles: dict[str, LoadedProfile],
                         out: TextIO) -> None:
    for relative, text in SAMPLE.items():
        target = workspace / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    sandbox = "workspace-write" if shutil.which("bwrap") else "danger-full-access"
    out.write(f"\n== scene 2: children at work in {workspace} (sandbox: {sandbox}"
              f"{'' if sandbox != 'danger-full-access' else '; install bubblewrap to sandbox'})\n")
    model = ScriptedModel(build_script(profiles))
    async with Engine(home, model_client=model, model="scripted-demo", profiles=profiles) as eng:
        parent = await eng.create_session(SessionConfig(
            instructions=PARENT, builtin_tools=True, cwd=str(workspace), sandbox=sandbox,
        ))
        await parent.send_and_wait("Test and lint the sample package.")
        for info in parent.subsessions.children():
            out.write(f"\n-- {info.session_type} ({info.status.word}, "
                      f"{info.usage.tool_calls} tool calls):\n{info.result or info.error}\n")
