"""Every Python example in docs/ and the README runs (pytest-examples), offline, in a fresh
folder that is also its HOME and SUBSESSIONS_HOME; `#>` comments are the output it must print.

An example that cannot run here (it needs a real model, a key, an MCP host, a cluster)
starts with a comment line `# not run: <why>`; it is only compiled (so it stays valid
Python), then skipped with that reason.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

pytest.importorskip("pytest_examples", reason="pip install 'subsessions[docs]'")

from pytest_examples import CodeExample, EvalExample, find_examples

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = list(find_examples(str(ROOT / "docs"), str(ROOT / "README.md")))
NOT_RUN = "# not run:"


def test_there_are_at_least_forty_examples_that_run() -> None:
    ran = [e for e in EXAMPLES if not e.source.lstrip().startswith(NOT_RUN)]
    assert len(ran) >= 40, len(ran)


def test_the_api_reference_names_every_public_name() -> None:
    import subsessions

    page = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^::: subsessions\.(\w+)$", page, flags=re.MULTILINE))
    assert sorted(set(subsessions.__all__) - named) == []


def _shell_blocks() -> list[tuple[str, str]]:
    """Every shell block of the docs and the README: (where, its text)."""
    found = []
    for page in [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]:
        text = page.read_text(encoding="utf-8")
        for block in re.finditer(r"```(?:sh|bash)\n(.*?)```", text, flags=re.DOTALL):
            where = f"{page.relative_to(ROOT)}:{text[:block.start()].count(chr(10)) + 1}"
            found.append((where, block.group(1)))
    return found


SHELL_BLOCKS = _shell_blocks()
OFFLINE = "--model-provider echo"  # the offline model: such a block runs in the tests
MARKED = "# offline"  # and so does a block that opens with this comment (no model at all)


def _runs(body: str) -> bool:
    return OFFLINE in body or body.lstrip().startswith(MARKED)


def test_shell_examples_that_need_a_model_say_so() -> None:
    """Shell blocks on the offline model run (below); another one that starts sessions (or
    a cluster, or an npm host) opens with a `# needs ...` comment saying what it needs."""
    needs = re.compile(r"subsessions (run|batch|mcp|serve|resume|a2a)\b|codex |ray start|npx ")
    silent = [where for where, body in SHELL_BLOCKS if needs.search(body) and not _runs(body)
              and not body.lstrip().startswith("# needs")]
    assert silent == [], silent


@pytest.mark.parametrize(("where", "body"), [b for b in SHELL_BLOCKS if _runs(b[1])],
                         ids=[w for w, b in SHELL_BLOCKS if _runs(b)])
def test_offline_shell_example(where: str, body: str, tmp_path: Path) -> None:
    """Run by bash in a fresh folder (its HOME and SUBSESSIONS_HOME), `subsessions` the
    package under test; its `#>` lines are what it must print, in that order."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "subsessions"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m subsessions "$@"\n')
    shim.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(tmp_path), "SUBSESSIONS_HOME": str(home),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", body], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (where, done.stdout, done.stderr)
    wanted = [line[3:] for line in body.splitlines() if line.startswith("#> ")]
    printed = done.stdout.splitlines()
    at = 0
    for line in wanted:
        assert line in printed[at:], (where, line, done.stdout)
        at = printed.index(line, at) + 1


def _marked(example: CodeExample) -> object:
    """`subsessions demo` runs real pytest and ruff: about 20 s on 2 busy cores."""
    slow = '"demo"' in example.source
    return pytest.param(example, marks=[pytest.mark.timeout(180)] if slow else [], id=str(example))


@pytest.mark.parametrize("example", [_marked(e) for e in EXAMPLES])
def test_docs_example(
    example: CodeExample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    if example.source.lstrip().startswith(NOT_RUN):
        compile(example.source, str(example.path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        why = example.source.lstrip().splitlines()[0].removeprefix(NOT_RUN).strip()
        pytest.skip(f"compiled, not run: {why}")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SUBSESSIONS_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")])))  # for the examples' subprocesses
    runner = EvalExample(tmp_path=tmp_path, pytest_request=request)
    runner.set_config(line_length=200)  # a printed line stays one `#>` line up to this
    try:
        runner.run_print_check(example)
    except Exception as exc:  # (pytest's own outcomes are not Exceptions: they pass through)
        # pytest cannot draw a traceback through the example's rewritten module (its code
        # positions do not match the file), so say where it failed, frame by frame, here.
        frames = [f"{f.f_code.co_filename}:{line}" for f, line in traceback.walk_tb(
            exc.__traceback__) if "pytest_examples" not in f.f_code.co_filename]
        raise AssertionError(f"{example}: {type(exc).__name__}: {exc}\n  at "
                             + "\n  at ".join(frames)) from None
