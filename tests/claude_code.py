"""Claude Code (`@anthropic-ai/claude-code` from npm) run offline as an MCP host, for tests.

`claude_binary()` installs the pinned package into the tests' npm cache once (skipped without
npm) and returns its native binary. `run_claude()` runs `claude -p PROMPT` non-interactively
with `--mcp-config` naming only the given servers (`--strict-mcp-config`), its model the
loopback fake of the Messages API (`ANTHROPIC_BASE_URL`, a dummy key), in a home of its own,
with telemetry, error reports, the updater and every other non-essential request off.
`ENABLE_TOOL_SEARCH=false` keeps MCP tools in each request's `tools` (Claude Code otherwise
defers them behind its ToolSearch tool, naming them only in a system message).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from npm_cache import cache_root, installed

VERSION = "2.1.332"
PACKAGE = f"@anthropic-ai/claude-code@{VERSION}"
TIMEOUT = 120.0


def _find(prefix: Path) -> Path | None:
    """The native binary of an install under `prefix` if it is the pinned version."""
    for found in sorted(prefix.glob("node_modules/@anthropic-ai/claude-code-*/claude")):
        try:
            out = subprocess.run([found, "--version"], capture_output=True, text=True,
                                 timeout=30, check=False).stdout
        except OSError:
            continue
        if out.split()[:1] == [VERSION]:
            return found
    return None


def claude_binary() -> Path:
    return installed(PACKAGE, cache_root() / "claude-code", _find)


def claude_env(home: Path, base_url: str) -> dict[str, str]:
    """This environment without Anthropic or Claude settings of the user's, pointed at the
    loopback model, with nothing else to dial."""
    assert base_url.startswith("http://127.0.0.1:"), base_url
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE_", "CLAUDECODE"))
           and k.upper() not in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY="loopback-only",
               NO_PROXY="127.0.0.1,localhost", DISABLE_TELEMETRY="1",
               DISABLE_ERROR_REPORTING="1", DISABLE_AUTOUPDATER="1",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", ENABLE_TOOL_SEARCH="false")
    return env


def _mcp_config(home: Path, servers: dict[str, Any]) -> Path:
    config = home / "mcp.json"
    home.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return config


async def run_claude(binary: Path, home: Path, base_url: str, servers: dict[str, Any],
                     prompt: str, *, allowed: str, cwd: Path) -> tuple[int, Any, str]:
    """`claude -p PROMPT` with these MCP servers: its exit code, its JSON result, stderr."""
    config = _mcp_config(home, servers)
    proc = await asyncio.create_subprocess_exec(
        binary, "-p", prompt, "--mcp-config", str(config), "--strict-mcp-config",
        "--output-format", "json", "--allowedTools", allowed,
        env=claude_env(home, base_url), cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.communicate()
        raise
    assert proc.returncode is not None
    return proc.returncode, json.loads(out) if out.strip() else None, err.decode()
