"""One model client for an engine whose sessions may use several providers.

A model id `PROVIDER:MODEL` whose prefix names a configured provider (`openai`, `ollama`,
`anthropic`, or a `[model_providers.NAME]` table) is sent to that provider as `MODEL`; any
other id goes to the engine's provider as it is (Ollama's `qwen3:8b` has no provider called
`qwen3`). So a profile's `model = "openai:gpt-5.1"` puts a Claude parent's child on OpenAI,
and `fallback_models` may cross providers. A provider's client is built on first use, so a
key that no session needs is never asked for. A profile's `a2a_url` makes its children's
model id `a2a:URL`: those go to the remote agent (`a2a_remote`), never to a provider.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from attrs import evolve

from subsessions.errors import ConfigError, ModelError
from subsessions.models.a2a_remote import RemoteAgents, is_remote_model
from subsessions.models.base import ModelRequest, ModelResponse
from subsessions.models.openai_common import respond_with_fallback
from subsessions.settings import Provider, Settings


class ProviderClient(Protocol):
    """One provider's client: an SDK's wire (`OpenAIModel`), or the offline `EchoModel`."""

    provider: str

    async def respond_as(self, request: ModelRequest, model: str) -> ModelResponse: ...

    async def aclose(self) -> None: ...


Build = Callable[[Provider], ProviderClient]


class ProviderRoutes:
    """The engine's provider's client, and the others' built when a model names them."""

    def __init__(self, settings: Settings, default: ProviderClient,
                 build: Build | None = None) -> None:
        self.default = default
        self.provider = default.provider
        self._providers = settings.providers
        self._clients: dict[str, ProviderClient] = {settings.model_provider: default}
        self._build = build
        self._remote = RemoteAgents()

    def __repr__(self) -> str:
        return f"<ProviderRoutes {', '.join(map(repr, self._clients.values()))}>"

    def provider_of(self, model: str) -> str:
        """The name of the provider `model` is sent to (what a rollout records)."""
        if is_remote_model(model):
            return "a2a"
        name, colon, bare = model.partition(":")
        return name if colon and bare and name in self._providers else self.provider

    def route(self, model: str) -> tuple[ProviderClient, str]:
        """The client that serves `model`, and the model's id on that provider."""
        name, colon, bare = model.partition(":")
        if not colon or not bare or name not in self._providers:
            return self.default, model
        client = self._clients.get(name)
        if client is None:
            if self._build is None:
                raise ModelError(f"model {model}: no client for provider {name}")
            try:
                client = self._build(self._providers[name])
            except ConfigError as exc:  # its key is not set, its SDK not installed: this task
                raise ModelError(f"model {model}: {exc}") from None
            self._clients[name] = client
        return client, bare

    async def respond(self, request: ModelRequest) -> ModelResponse:
        if is_remote_model(request.model):
            return await self._remote.respond(request)
        return await respond_with_fallback(request, self._respond_as)

    async def _respond_as(self, request: ModelRequest, model: str) -> ModelResponse:
        client, bare = self.route(model)
        response = await client.respond_as(request, bare)
        return response if bare == model else evolve(response, model=model)

    async def aclose(self) -> None:
        await self._remote.aclose()
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
