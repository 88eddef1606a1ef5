"""What a session cost: tokens, tool calls, model turns; summed over a tree on request."""

from __future__ import annotations

from collections.abc import Iterable

from attrs import frozen


@frozen
class Usage:
    """What a session has spent: reported tokens, tool calls and turns (model calls).

    `estimated` is true when some tokens were estimated here (at four characters a token)
    because the server reported none. `total_tokens` is input + output.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    turns: int = 0
    estimated: bool = False  # some tokens were counted here: the server reported none

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, int]:
        """The shape `list_sessions` and `subagent.usage` report."""
        shown = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                 "total_tokens": self.total_tokens, "turns": self.turns,
                 "tool_calls": self.tool_calls}
        if self.estimated:
            shown["estimated"] = True
        return shown

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            tool_calls=self.tool_calls + other.tool_calls,
            turns=self.turns + other.turns,
            estimated=self.estimated or other.estimated,
        )

    @staticmethod
    def total(parts: Iterable[Usage]) -> Usage:
        summed = Usage()
        for part in parts:
            summed = summed + part
        return summed
