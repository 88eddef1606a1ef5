"""The model seam: one async method, like a transport."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from attrs import field, frozen

from subsessions.items import Item


@frozen
class TokenUsage:
    """What the model reported for a call (or a running total): Codex's five counts.

    `cached_input_tokens` is part of `input_tokens`, `reasoning_output_tokens` part of
    `output_tokens`, as both wire APIs report them. `estimated`: some of it was counted
    here (`openai_common.estimated_usage`) because the server reported none, or none that
    were counts (`openai_common.reported_usage`); a sum with an estimate in it is one too,
    and says so wherever it is shown (`"estimated": true`)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_output_tokens: int = 0
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
            self.reasoning_output_tokens + other.reasoning_output_tokens,
            self.estimated or other.estimated,
        )

    def as_dict(self) -> dict[str, int]:
        """Codex's five counts (`token_count`), and `estimated: true` beside them if so."""
        counts = {
            "input_tokens": self.input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "output_tokens": self.output_tokens,
            "reasoning_output_tokens": self.reasoning_output_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.estimated:
            counts["estimated"] = True
        return counts


CHARS_PER_TOKEN = 4
"""OpenAI's rule of thumb for English text (about four characters a token); JSON and code
run a little denser, so estimates err towards fewer tokens than a tokenizer counts."""


def estimate_tokens(characters: int) -> int:
    """Tokens for `characters` of text, rounded up: any text at all is at least one token."""
    return -(-characters // CHARS_PER_TOKEN)


NO_USAGE = TokenUsage()  # frozen, so every session starts from this one

TOOL_CHOICE_WORDS = ("auto", "required", "none")
"""What `tool_choice` may say besides a tool's name (which forces that tool)."""


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
    # auto | required | none | a tool's name; sent (with the tools) on both wire APIs, as
    # llama.cpp's chatml-function-calling ignores the tools unless it is told `auto`
    tool_choice: str = "auto"
    # a profile's `reasoning_effort` (Codex's `model_reasoning_effort`: minimal, low, medium,
    # high): `reasoning.effort` on the Responses API, `reasoning_effort` on Chat Completions
    reasoning_effort: str | None = None
    # the leading items that are a fork's copy of another conversation: the Anthropic wire
    # puts a cache breakpoint at their end, so forked siblings read the copy from its cache
    shared_items: int = 0

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(spec["name"] for spec in self.tools)


@frozen
class ModelResponse:
    """What a `ModelClient` answers to one `ModelRequest`.

    Attributes:
        output: the output items, in the Responses API's format: assistant `message`
            items and `function_call` items (the calls the session then runs).
        usage: the tokens the provider reported for this call (zeros if it reported none).
        model: the model id that answered: the one asked for, or a fallback that stood in
            for it. None: the one asked for.
    """

    output: tuple[Item, ...]
    usage: TokenUsage = field(factory=TokenUsage)
    model: str | None = None  # the model id that answered: the one asked, or a fallback


@runtime_checkable
class ModelClient(Protocol):
    """Anything that turns a request into output items: scripted, OpenAI, vLLM, ..."""

    async def respond(self, request: ModelRequest) -> ModelResponse: ...
