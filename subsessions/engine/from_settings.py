"""One way from `Settings` to a running `Engine`, for every command (`run`, `resume`,
`batch`, `serve`, `mcp`): a new setting is wired once, and no command silently ignores one
(`serve` once built its engine without `[ray]`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from subsessions.engine.facade import Engine
from subsessions.models.factory import build_model_client
from subsessions.profiles import LoadedProfile
from subsessions.ray.backend import backend_from
from subsessions.settings import Settings


@contextlib.asynccontextmanager
async def engine_from_settings(
    home: Path, settings: Settings, profiles: Mapping[str, LoadedProfile] | None = None,
) -> AsyncIterator[Engine]:
    """The engine the settings describe (model, provider, MCP servers, `[ray]`), with the
    model client it owns; leaving closes the engine first, then the client. `profiles`:
    those already read (`subsessions mcp` listed its tools from them), else the home's."""
    client = build_model_client(settings)
    try:
        async with Engine(home, model_client=client, model=settings.model,
                          model_provider=settings.model_provider,
                          mcp_servers=settings.mcp_servers, mcp_source=settings.source,
                          backend=backend_from(settings), profiles=profiles) as engine:
            yield engine
    finally:
        await client.aclose()
