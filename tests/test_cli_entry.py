"""The console entry as a new user meets it (issue 35, item 13): Ctrl-C while the command's
modules are still loading ends it as quietly as later (130, no traceback), and the help of
`mcp` and `serve` says what each serves and where."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, fake_openai
from openai_support import REPO, cli_env
from serve_raw import Runtimes, dial, end_of, runtimes

__all__ = ["fake_openai", "runtimes"]

# Holds the process inside the import of $PARK_AT (told on stderr) until a signal ends it:
# a Ctrl-C at that very moment, however fast the machine.
PARK = """
import os, sys, time

class _Park:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == os.environ.get("PARK_AT"):
            sys.meta_path.remove(_Park)
            sys.stderr.write("parked\\n")
            sys.stderr.flush()
            time.sleep(60)
        return None

sys.meta_path.insert(0, _Park)
"""


def entries() -> dict[str, list[str]]:
    """`python -m subsessions`, and what the console script declared in pyproject runs."""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = declared["subsessions"].partition(":")
    script = f"import sys; from {module} import {function}; sys.exit({function}())"
    return {"-m": [sys.executable, "-m", "subsessions"],
            "console script": [sys.executable, "-c", script]}


def default_sigint() -> None:  # pragma: no cover - runs in the child between fork and exec
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("entry", ["-m", "console script"])
@pytest.mark.parametrize("module", ["typing", "subsessions.cli", "asyncio",
                                    "subsessions.rollouts.reader"])
def test_ctrl_c_while_the_modules_load_exits_130_quietly(
    tmp_path: Path, entry: str, module: str
) -> None:
    (tmp_path / "sitecustomize.py").write_text(PARK)
    env = cli_env()
    env.update(PARK_AT=module, SUBSESSIONS_HOME=str(tmp_path / "home"),
               PYTHONPATH=f"{tmp_path}:{env['PYTHONPATH']}")
    with subprocess.Popen([*entries()[entry], "rollouts", "list"], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, preexec_fn=default_sigint) as proc:
        assert proc.stderr is not None
        try:
            assert proc.stderr.readline() == b"parked\n"
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert (proc.returncode, out, err.decode()) == (130, b"", "")


def help_of(*command: str) -> str:
    """`subsessions COMMAND --help`, its lines joined as one text."""
    result = subprocess.run([sys.executable, "-m", "subsessions", *command, "--help"],
                            env=cli_env(), capture_output=True, text=True, timeout=30,
                            check=True)
    return " ".join(result.stdout.split())


async def test_mcp_help_names_exactly_the_tools_it_serves(
    tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")
    from mcp_support import connect

    description = help_of("mcp").partition(" options: ")[0]
    named = set(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b", description))
    with (tmp_path / "stderr").open("w") as errlog:
        async with connect(tmp_path / "home", fake_openai, tmp_path, errlog) as session:
            served = {tool.name for tool in (await session.list_tools()).tools}
    assert named == served, description


async def test_serve_without_a_transport_flag_listens_as_its_help_says(
    tmp_path: Path, fake_openai: FakeOpenAI, runtimes: Runtimes
) -> None:
    text = help_of("serve")
    assert "With --stdio it serves on stdin/stdout" in text, text
    assert ("Without --stdio it listens on 127.0.0.1 (--port N, else any free port" in text
            and "prints 'listening on port N'" in text), text
    proc, port = await runtimes.tcp(tmp_path / "home", fake_openai, tmp_path, port=())
    host = await dial(port)
    assert (await host.call("ping", {"message": "tcp"}))["result"]["message"] == "pong: tcp"
    os.kill(proc.pid, signal.SIGTERM)
    code, err = await end_of(proc, host)
    assert code == 128 + signal.SIGTERM, err
