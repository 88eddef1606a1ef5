"""Model clients built from settings (config.toml's provider); settings itself imports no model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from subsessions.errors import ConfigError
from subsessions.settings import Provider, Settings, api_key

if TYPE_CHECKING:  # the SDKs are imported only by commands that talk to a model
    from subsessions.models.routes import ProviderClient, ProviderRoutes

ANTHROPIC_EXTRA = "pip install 'subsessions[anthropic]'"


def build_model_client(settings: Settings) -> ProviderRoutes:
    """The configured provider's client, shared by every session of the engine; a model id
    `PROVIDER:MODEL` naming another configured provider (a profile's `model`) reaches that
    one, its client built on first use."""
    from subsessions.models.routes import ProviderRoutes

    def build(provider: Provider) -> ProviderClient:
        return build_provider_client(settings, provider)

    return ProviderRoutes(settings, build(settings.provider), build)


def build_provider_client(settings: Settings, provider: Provider) -> ProviderClient:
    """One SDK client for `provider` (`AsyncOpenAI` or `AsyncAnthropic`), its retries off;
    the offline `echo` model for the `echo` wire."""
    from subsessions.models.openai_common import RetryPolicy

    if provider.wire_api == "echo":
        from subsessions.models.scripted import EchoModel

        return EchoModel()
    retry = RetryPolicy(max_retries=provider.request_max_retries)
    idle = provider.stream_idle_timeout_ms / 1000
    cap = settings.model_max_output_tokens
    key = api_key(provider)
    if provider.wire_api == "anthropic":
        try:
            import anthropic
        except ImportError:
            raise ConfigError(f"provider {provider.name}", "wire_api",
                              f"the anthropic wire needs the anthropic SDK: {ANTHROPIC_EXTRA}"
                              ) from None
        from subsessions.models.anthropic_messages import DEFAULT_MAX_TOKENS
        from subsessions.models.anthropic_wire import AnthropicModel

        thinking = provider.thinking_budget_tokens
        if thinking and thinking >= (cap or DEFAULT_MAX_TOKENS):
            raise ConfigError(f"provider {provider.name}", "thinking_budget_tokens",
                              f"must be below max_tokens ({cap or DEFAULT_MAX_TOKENS}; "
                              "model_max_output_tokens sets it)")
        return AnthropicModel(
            anthropic.AsyncAnthropic(base_url=provider.base_url, api_key=key, max_retries=0),
            provider=provider.name, retry=retry, stream_idle_timeout=idle,
            max_output_tokens=cap, prompt_cache=provider.prompt_cache, stream=provider.stream,
            thinking_budget_tokens=thinking,
        )
    import openai

    from subsessions.models.openai_chat import OpenAIChatModel
    from subsessions.models.openai_responses import OpenAIResponsesModel

    client = openai.AsyncOpenAI(base_url=provider.base_url, api_key=key, max_retries=0)
    kind: type[OpenAIChatModel | OpenAIResponsesModel] = (
        OpenAIChatModel if provider.wire_api == "chat" else OpenAIResponsesModel
    )
    return kind(client, provider=provider.name, retry=retry, stream_idle_timeout=idle,
                max_output_tokens=cap)
