"""The model seam: one async method, like a transport."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from attrs import field, frozen

from subsessions.items import Item


@frozen
class TokenUsage:
    """What the model reported for a call (or a running total): Codex's five counts.

    `cached_input_tokens` is part of `input_tokens`, `reasoning_output_tokens` part of
    `output_tokens`, as both wire APIs report them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.reasoning_output_tokens + other.reasoning_output_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_output_tokens": self.reasoning_output_tokens,
            "total_tokens": self.total_tokens,
        }


NO_USAGE = TokenUsage()  # frozen, so every session starts from this one


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
