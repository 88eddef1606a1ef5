"""The real Codex CLI (0.169, npm) as the MCP host of `subsessions mcp`, first turn included.

Codex gives a server that is not `required` about one second from the start of a turn to list
its tools (openai/codex#31641), then sends the turn's first model request without the tools
of any server still starting. `subsessions mcp` answers `tools/list` from its profiles before
building its engine, so a plain `[mcp_servers.subsessions]` entry (no `required`, no startup
timeout) has every tool in that first request, here while another process burns a core.

Whether a machine is fast enough for any Python MCP server to make that second is not ours to
decide: when our tools are missing, the same run with a minimal server on the same `mcp` SDK,
taking turns with ours, tells which it is. The minimal one listing twice while ours never does
is a failure; fewer skips the test, naming the load.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import codex_cli
import pytest
from codex_cli import codex_binary, offline_home
from fake_openai import FakeOpenAI, Recorded, fake_openai, text
from openai_support import cli_env

from subsessions.mcp.catalog import TOOL_NAMES

__all__ = ["fake_openai"]  # the fixture

REPO = Path(__file__).resolve().parents[2]
MINIMAL = [sys.executable, str(REPO / "bench" / "mcp_startup.py"), "--serve-minimal"]
# A model Codex has no metadata for gets its tools as plain functions. Its own models run in
# "code mode", where MCP tools are deferred behind `exec` and left out of the request
# whenever they are ready (openai/codex#17287), so the first request could show nothing.
MODEL = "loopback-model"
BURN_SECONDS = 120  # the burner's own bound; it is killed when the test ends


@pytest.fixture(scope="module")
def codex() -> Path:
    """The Codex binary (npm-installed into the cache on first use; skipped without npm)."""
    return codex_binary()


@contextlib.contextmanager
def cpu_burner() -> Iterator[subprocess.Popen[bytes]]:
    """Another process spinning on one core for the test's length (bounded, then killed)."""
    loop = (f"import time\nend = time.monotonic() + {BURN_SECONDS}\n"
            "while time.monotonic() < end:\n    pass\n")
    proc = subprocess.Popen([sys.executable, "-c", loop])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _server_table(name: str, command: list[str]) -> str:
    """A plain `[mcp_servers.NAME]` table: command, args, and the repository importable."""
    env = {"PYTHONPATH": cli_env()["PYTHONPATH"]}
    return (f"\n[mcp_servers.{name}]\ncommand = {json.dumps(command[0])}\n"
            f"args = {json.dumps(command[1:])}\n"
            f"env = {{ PYTHONPATH = {json.dumps(env['PYTHONPATH'])} }}\n")


def _listed(request: Recorded, name: str) -> set[str]:
    """The tools of MCP server `name` in a Responses request (Codex's `mcp__NAME` namespace)."""
    found: set[str] = set()
    for tool in request.body.get("tools") or []:
        if tool.get("type") == "namespace" and tool.get("name") == f"mcp__{name}":
            found |= {str(t.get("name")) for t in tool.get("tools") or []}
    return found


async def _first_request(binary: Path, fake: FakeOpenAI, home: Path, name: str,
                         command: list[str]) -> Recorded:
    """`codex exec` on a fresh home with one MCP server; the turn's first model request."""
    offline_home(home, fake.base_url, {"loopback"}, "loopback")
    with (home / "config.toml").open("a", encoding="utf-8") as config:
        config.write(_server_table(name, command))
    before = len(fake.requests)
    status, out, err = await codex_cli.codex(
        binary, home, "exec", "--skip-git-repo-check", "-m", MODEL, "Say hello.")
    assert status == 0, (out, err)
    assert out.strip().endswith("hello"), out
    return fake.requests[before]


async def test_codex_lists_our_tools_in_its_first_request_under_load(
    codex: Path, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.script = lambda request: text("hello")
    ours = [sys.executable, "-m", "subsessions", "mcp", "--home", str(tmp_path / "ours"),
            "--base-url", fake_openai.base_url, "--wire-api", "chat", "--model", "m"]
    # A first, untimed run: a fresh clone compiles our modules on its first start.
    await _first_request(codex, fake_openai, tmp_path / "warm", "subsessions", ours)
    with cpu_burner():
        # Codex waits about a second for its servers; on a loaded two-core machine a cold
        # Python server lands either side of it, ours about 10% later than a minimal one
        # (bench/mcp_tools_list.py). Ours and the control take turns, up to four each: ours
        # listing once passes; the control listing at least twice while ours never did fails
        # (a server that waits for its engine before answering, as ours once did, misses
        # every time); fewer is a machine too loaded to tell.
        control_listed = 0
        for attempt in range(4):
            first = await _first_request(codex, fake_openai, tmp_path / f"codex{attempt}",
                                         "subsessions", ours)
            listed = _listed(first, "subsessions")
            if listed:
                break
            control = await _first_request(codex, fake_openai, tmp_path / f"control{attempt}",
                                           "minimal", MINIMAL)
            control_listed += bool(_listed(control, "minimal"))
        if not listed and control_listed < 2:
            pytest.skip("this machine is too loaded for Codex's one-second MCP grace: "
                        f"a minimal server on the same mcp SDK listed {control_listed} of 4")
    assert listed == set(TOOL_NAMES), f"ours never listed; the control did {control_listed} of 4"
