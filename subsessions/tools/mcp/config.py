"""`[mcp_servers.NAME]` tables, checked. No MCP SDK needed to validate a config.

    [mcp_servers.files]                       # a local server, spoken to over stdio
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"]
    env = { LOG_LEVEL = "warn" }              # on top of HOME, PATH, SHELL, TERM, USER, LOGNAME
    cwd = "/srv"
    startup_timeout_ms = 10000                # default 10000
    tool_timeout_ms = 60000                   # default 60000

    [mcp_servers.search]                      # a remote one, over streamable HTTP
    url = "http://127.0.0.1:9000/mcp"
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from attrs import frozen

from subsessions._util.urls import url_problem
from subsessions.errors import ConfigError

DEFAULT_STARTUP_TIMEOUT_MS = 10_000
DEFAULT_TOOL_TIMEOUT_MS = 60_000
_NAME = re.compile(r"[A-Za-z0-9_-]+")
_KEYS = ("command", "args", "env", "cwd", "url", "startup_timeout_ms", "tool_timeout_ms")
_COMMAND_ONLY = ("args", "env", "cwd")


@frozen
class McpServerConfig:
    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    startup_timeout_ms: int = DEFAULT_STARTUP_TIMEOUT_MS
    tool_timeout_ms: int = DEFAULT_TOOL_TIMEOUT_MS


def parse_mcp_servers(servers: Any, source: str = "config.toml") -> tuple[McpServerConfig, ...]:
    """Every server table checked; the first problem raises `ConfigError` naming its key."""
    if not isinstance(servers, Mapping):
        raise ConfigError(source, "mcp_servers", "must be a table of server tables")
    return tuple(_server(source, str(name), table) for name, table in servers.items())


def _server(source: str, name: str, table: Any) -> McpServerConfig:
    where = f"mcp_servers.{name}"
    if not _NAME.fullmatch(name):
        raise ConfigError(source, where,
                          "server names may use only letters, digits, '_' and '-'")
    if not isinstance(table, Mapping):
        raise ConfigError(source, where, "must be a table")
    for key in table:
        if key not in _KEYS:
            raise ConfigError(source, f"{where}.{key}",
                              f"unknown key (known: {', '.join(_KEYS)})")
    fields: dict[str, Any] = {"name": name}
    for key in ("command", "cwd", "url"):
        if key in table:
            fields[key] = _string(source, f"{where}.{key}", table[key])
    if "args" in table:
        args = table["args"]
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ConfigError(source, f"{where}.args", "must be a list of strings")
        fields["args"] = tuple(args)
    if "env" in table:
        env = table["env"]
        if not isinstance(env, Mapping) or not all(isinstance(v, str) for v in env.values()):
            raise ConfigError(source, f"{where}.env", "must be a table of strings")
        fields["env"] = {str(k): v for k, v in env.items()}
    for key in ("startup_timeout_ms", "tool_timeout_ms"):
        if key in table:
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(source, f"{where}.{key}",
                                  "must be a positive integer (milliseconds)")
            fields[key] = value
    if "url" in fields:
        if "command" in fields:
            raise ConfigError(source, f"{where}.url", "give either command or url, not both")
        problem = url_problem(fields["url"])
        if problem:
            raise ConfigError(source, f"{where}.url", problem)
        for key in _COMMAND_ONLY:
            if key in table:
                raise ConfigError(source, f"{where}.{key}",
                                  "only applies to a server started with `command`")
    elif "command" not in fields:
        raise ConfigError(source, f"{where}.command",
                          "is required: a program to run, or give `url` for an HTTP server")
    return McpServerConfig(**fields)


def _string(source: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(source, key, "must be a non-empty string")
    return value
