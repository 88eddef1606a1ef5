"""Model clients built from settings (config.toml's provider); settings itself imports no model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from subsessions.settings import Settings, api_key

if TYPE_CHECKING:  # the openai SDK is imported only by commands that talk to a model
    from subsessions.models.openai_chat import OpenAIChatModel
    from subsessions.models.openai_responses import OpenAIResponsesModel


def build_model_client(settings: Settings) -> OpenAIChatModel | OpenAIResponsesModel:
    """One `AsyncOpenAI` for the provider, shared by every session of the engine."""
    import openai

    from subsessions.models.openai_chat import OpenAIChatModel
    from subsessions.models.openai_common import RetryPolicy
    from subsessions.models.openai_responses import OpenAIResponsesModel

    provider = settings.provider
    client = openai.AsyncOpenAI(
        base_url=provider.base_url, api_key=api_key(provider), max_retries=0
    )
    kind: type[OpenAIChatModel | OpenAIResponsesModel] = (
        OpenAIChatModel if provider.wire_api == "chat" else OpenAIResponsesModel
    )
    return kind(
        client,
        provider=provider.name,
        retry=RetryPolicy(max_retries=provider.request_max_retries),
        stream_idle_timeout=provider.stream_idle_timeout_ms / 1000,
        max_output_tokens=settings.model_max_output_tokens,
    )
