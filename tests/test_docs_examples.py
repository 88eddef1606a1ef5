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


def test_shell_examples_that_need_a_model_say_so() -> None:
    """Shell blocks are not run; one that starts sessions (or a cluster, or an npm host)
    opens with a `# needs ...` comment saying what it needs."""
    needs = re.compile(r"subsessions (run|batch|mcp|serve|resume|a2a)\b|codex |ray start|npx ")
    silent = []
    for page in [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]:
        text = page.read_text(encoding="utf-8")
        for block in re.finditer(r"```(?:sh|bash)\n(.*?)```", text, flags=re.DOTALL):
            body = block.group(1)
            if needs.search(body) and not body.lstrip().startswith("# needs"):
                silent.append(f"{page.name}:{text[:block.start()].count(chr(10)) + 1}")
    assert silent == [], silent


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
