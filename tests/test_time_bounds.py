"""A hang fails: this suite's pytest settings bound every test (pytest-timeout), so a wait
that never ends is a failure naming the test, with a traceback, and the run goes on."""

from __future__ import annotations

import asyncio
import json
import sys
import tomllib
from pathlib import Path

from openai_support import REPO

HANGS = '''
import asyncio


async def test_a_wait_that_never_ends():
    await asyncio.Event().wait()


def test_the_next_one():
    pass
'''


def settings_of_this_suite() -> str:
    """`[tool.pytest.ini_options]` as the repository's pyproject.toml has it."""
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]
    assert options["timeout"] == 60  # every test's bound unless it is marked
    lines = [f"{key} = {toml_value(value)}" for key, value in options.items()
             if key not in ("testpaths", "addopts")]
    return "[tool.pytest.ini_options]\n" + "\n".join(lines) + "\n"


def toml_value(value: object) -> str:
    """TOML for the option values pyproject uses: strings (JSON's escapes are TOML's),
    numbers, booleans and lists of them."""
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


async def test_a_hanging_test_fails_with_a_traceback_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(settings_of_this_suite())
    (tmp_path / "test_hangs.py").write_text(HANGS)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "timeout=1",
        "-p", "no:phoenix",  # as the suite's addopts (not copied): Phoenix's plugin stays out
        cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    report = out.decode()
    assert proc.returncode == 1, report
    assert "FAILED test_hangs.py::test_a_wait_that_never_ends" in report
    assert "Failed: Timeout (>1.0s) from pytest-timeout." in report
    assert "1 failed, 1 passed" in report
