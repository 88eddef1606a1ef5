"""The model seam: one async method, like a transport."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from attrs import field, frozen

from subsessions.items import Item


@frozen
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }


@frozen
class ModelRequest:
    """What a session asks of its model for one turn.

    `tools` are Responses-format function specs (`{"type": "function", "name", ...}`).
    """

    session_id: str
    model: str
    instructions: str
    items: tuple[Item, ...]
    tools: tuple[dict[str, Any], ...] = ()
    fallback_models: tuple[str, ...] = ()  # tried in order when `model` is unavailable

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(spec["name"] for spec in self.tools)


@frozen
class ModelResponse:
    output: tuple[Item, ...]
    usage: TokenUsage = field(factory=TokenUsage)
    model: str | None = None  # the model id that answered: the one asked, or a fallback


@runtime_checkable
class ModelClient(Protocol):
    """Anything that turns a request into output items: scripted, OpenAI, vLLM, ..."""

    async def respond(self, request: ModelRequest) -> ModelResponse: ...
