"""One way from `Settings` to a running `Engine`, for every command (`run`, `resume`,
`batch`, `serve`, `mcp`): a new setting is wired once, and no command silently ignores one
(`serve` once built its engine without `[ray]`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from subsessions.engine import Engine
from subsessions.models.factory import build_model_client
from subsessions.ray.backend import backend_from
from subsessions.settings import Settings


@contextlib.asynccontextmanager
async def engine_from_settings(home: Path, settings: Settings) -> AsyncIterator[Engine]:
    """The engine the settings describe (model, provider, MCP servers, `[ray]`), with the
    model client it owns; leaving closes the engine first, then the client."""
    client = build_model_client(settings)
    try:
        async with Engine(home, model_client=client, model=settings.model,
                          model_provider=settings.model_provider,
                          mcp_servers=settings.mcp_servers, mcp_source=settings.source,
                          backend=backend_from(settings)) as engine:
            yield engine
    finally:
        await client.aclose()
