"""Budget: the limits a session (or a whole tree) may spend, as a value.

`None` is "no limit" for each kind. Budgets meet by taking the tighter limit of each
kind (`clamp`), which is how a child's budget is bounded by its profile, its parent and
its tree; what is spent against them is counted by `meter.Meter`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from attrs import field, frozen

from subsessions.errors import InvalidArguments

KINDS = {"max_turns": "integer", "max_tokens": "integer", "max_seconds": "number"}


def _limit(kind: str) -> Any:
    def check(_instance: Any, attribute: Any, value: Any) -> None:
        if value is None:
            return
        integer = kind == "integer"
        if isinstance(value, bool) or not isinstance(value, int if integer else int | float):
            raise ValueError(f"{attribute.name} must be {'an integer' if integer else 'a number'}"
                             f" or None, not {value!r:.40}")
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{attribute.name} must be positive, not {value!r}")

    return check


def _tighter(a: float | None, b: float | None) -> Any:
    if a is None:
        return b
    return a if b is None else min(a, b)


@frozen
class Budget:
    """Limits on model calls (`max_turns`), reported tokens (`max_tokens`, input + output,
    descendants included) and wall time (`max_seconds`); each `None` for no limit."""

    max_turns: int | None = field(default=None, validator=_limit("integer"))
    max_tokens: int | None = field(default=None, validator=_limit("integer"))
    max_seconds: float | None = field(default=None, validator=_limit("number"))

    @property
    def unlimited(self) -> bool:
        return self.max_turns is None and self.max_tokens is None and self.max_seconds is None

    def clamp(self, other: Budget | None) -> Budget:
        """The tighter limit of each kind (a limit of `other` may be 0 or less: spent)."""
        if other is None:
            return self
        return _clamped(_tighter(self.max_turns, other.max_turns),
                        _tighter(self.max_tokens, other.max_tokens),
                        _tighter(self.max_seconds, other.max_seconds))

    def as_dict(self) -> dict[str, int | float | None]:
        return {"max_turns": self.max_turns, "max_tokens": self.max_tokens,
                "max_seconds": self.max_seconds}


def _clamped(turns: int | None, tokens: int | None, seconds: float | None) -> Budget:
    """A budget whose limits may be spent already (0 or less: reached at once)."""
    budget = Budget()
    object.__setattr__(budget, "max_turns", turns)
    object.__setattr__(budget, "max_tokens", tokens)
    object.__setattr__(budget, "max_seconds", seconds)
    return budget


def left(limits: Budget, turns: int, tokens: int, seconds: float) -> Budget:
    """What `limits` leave after what was spent (a spent limit is 0, never negative)."""
    return _clamped(
        None if limits.max_turns is None else max(0, limits.max_turns - turns),
        None if limits.max_tokens is None else max(0, limits.max_tokens - tokens),
        None if limits.max_seconds is None else max(0.0, limits.max_seconds - seconds),
    )


def parse_budget(value: Any, target: str) -> Budget | None:
    """A caller's `budget`: null, or an object of the three nullable limits (positive
    numbers, turns and tokens whole). Every problem is `invalid arguments for {target}`."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidArguments(target, "budget must be an object or null")
    limits: dict[str, Any] = {}
    for key, limit in value.items():
        kind = KINDS.get(key)
        if kind is None:
            raise InvalidArguments(target, f"budget has an unexpected property {key!r:.40}; "
                                   f"expected {', '.join(KINDS)}")
        if limit is None:
            continue
        if isinstance(limit, bool) or not isinstance(limit, int | float) or (
                kind == "integer" and not float(limit).is_integer()):
            article = "an integer" if kind == "integer" else "a number"
            raise InvalidArguments(target, f"budget.{key} must be {article} or null")
        if not (math.isfinite(limit) and limit > 0):
            raise InvalidArguments(target, f"budget.{key} must be positive")
        limits[key] = int(limit) if kind == "integer" else float(limit)
    return Budget(**limits)
