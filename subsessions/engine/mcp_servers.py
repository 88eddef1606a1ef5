"""An engine's MCP servers: the engine's own (`mcp_servers=`) and each config's tables
(`SessionConfig.mcp_servers`), each source started once, lazily, and stopped at close."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from subsessions.config import SessionConfig
from subsessions.errors import ConfigError


class McpSources:
    """The `McpServers` an engine's sessions take their MCP tools from."""

    def __init__(self, mcp_servers: Mapping[str, Any] | None, mcp_source: str) -> None:
        self._mcp_sources: list[Any] = []  # McpServers, started lazily, stopped at close
        if mcp_servers:
            self._mcp_sources.append(_mcp_servers(mcp_servers, mcp_source))
        self._mcp_engine_sources = tuple(self._mcp_sources)
        self._mcp_by_tables: dict[int, tuple[Mapping[str, Any], Any]] = {}

    async def tools(self, config: SessionConfig) -> tuple[tuple[Any, ...], dict[str, str]]:
        """The engine's and the config's MCP servers' tools, starting each source once."""
        sources = list(self._mcp_engine_sources)
        if config.mcp_servers:
            key = id(config.mcp_servers)
            known = self._mcp_by_tables.get(key)
            if known is None or known[0] is not config.mcp_servers:  # once per engine
                own = _mcp_servers(config.mcp_servers, "SessionConfig.mcp_servers")
                known = self._mcp_by_tables[key] = (config.mcp_servers, own)
                self._mcp_sources.append(own)
            sources.append(known[1])
        tools: list[Any] = []
        errors: dict[str, str] = {}
        for source in sources:
            tools.extend(await source.tools())
            errors.update(source.errors)
        return tuple(tools), errors

    async def aclose(self) -> None:
        """Stop every source started (at the engine's close)."""
        for source in self._mcp_sources:
            await source.aclose()


def _mcp_servers(tables: Mapping[str, Any], source: str) -> Any:
    """An `McpServers` for the tables; the MCP SDK is an optional extra."""
    try:
        from subsessions.tools.mcp.client import McpServers
    except ImportError:
        raise ConfigError(source, "mcp_servers", "needs the MCP SDK: pip install "
                          "'subsessions[mcp]'") from None
    return McpServers(tables, source=source)
