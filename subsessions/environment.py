"""What a command's environment holds: Codex's `shell_environment_policy`, the same defaults.

The engine's own environment carries its secrets (`OPENAI_API_KEY`, tokens of other tools); a
command a model asked for must not see them, or they reach the model's context and the rollout.
The policy is applied in Codex's order: start from `inherit` (`all`, `core` or `none`), drop
names matching the default excludes (`*KEY*`, `*SECRET*`, `*TOKEN*`, case-insensitive) unless
`ignore_default_excludes`, drop names matching `exclude`, add `set`, and finally keep only names
matching `include_only` when it is given. Patterns are shell globs, matched case-insensitively.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from attrs import field, frozen

from subsessions.errors import ConfigError

INHERIT = ("all", "core", "none")
CORE_VARIABLES = ("HOME", "LOGNAME", "PATH", "SHELL", "USER", "USERNAME", "TMPDIR", "TEMP", "TMP")
DEFAULT_EXCLUDES = ("*KEY*", "*SECRET*", "*TOKEN*")


def _patterns(value: Any) -> tuple[str, ...]:
    return tuple(value)


@functools.cache
def _matcher(patterns: tuple[str, ...]) -> Callable[[str], object]:
    """One case-insensitive regular expression for all the globs (built once per policy)."""
    joined = "|".join(fnmatch.translate(pattern) for pattern in patterns)
    return re.compile(joined, re.IGNORECASE).match


@frozen
class EnvPolicy:
    """Which of the engine's environment variables a command gets (Codex's policy)."""

    inherit: str = field(default="all")
    ignore_default_excludes: bool = False
    exclude: tuple[str, ...] = field(default=(), converter=_patterns)
    include_only: tuple[str, ...] = field(default=(), converter=_patterns)
    set: Mapping[str, str] = field(factory=dict, hash=False)

    @inherit.validator
    def _check_inherit(self, _attribute: Any, value: str) -> None:
        if value not in INHERIT:
            raise ValueError(f"inherit must be one of: {', '.join(INHERIT)}; not {value!r}")

    def apply(self, environ: Mapping[str, str]) -> dict[str, str]:
        if self.inherit == "all":
            env = dict(environ)
        elif self.inherit == "core":
            env = {k: v for k, v in environ.items() if k in CORE_VARIABLES}
        else:
            env = {}
        dropped = (() if self.ignore_default_excludes else DEFAULT_EXCLUDES) + self.exclude
        if dropped:
            match = _matcher(dropped)
            env = {k: v for k, v in env.items() if not match(k)}
        env.update(self.set)
        if self.include_only:
            match = _matcher(self.include_only)
            env = {k: v for k, v in env.items() if match(k)}
        return env


def env_policy_from_table(table: Any, source: str) -> EnvPolicy:
    """A `[shell_environment_policy]` table of config.toml, checked key by key."""
    where = "shell_environment_policy"
    if not isinstance(table, dict):
        raise ConfigError(source, where, "must be a table")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key == "inherit":
            if value not in INHERIT:
                problem = f"must be one of {', '.join(INHERIT)}"
                raise ConfigError(source, f"{where}.inherit", problem)
            values[key] = value
        elif key == "ignore_default_excludes":
            if not isinstance(value, bool):
                raise ConfigError(source, f"{where}.{key}", "must be true or false")
            values[key] = value
        elif key in ("exclude", "include_only"):
            if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
                raise ConfigError(source, f"{where}.{key}", "must be a list of name patterns")
            values[key] = tuple(value)
        elif key == "set":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ConfigError(source, f"{where}.set", "must be a table of strings")
            values[key] = dict(value)
        else:
            raise ConfigError(source, f"{where}.{key}", "unknown key")
    return EnvPolicy(**values)


def command_environment(policy: EnvPolicy) -> dict[str, str]:
    """`policy` applied to this process's environment: worked out once per environment (a
    command is started often; the environment seldom changes), a fresh dict each call."""
    return dict(_applied(policy, _environment_key()))


def _environment_key() -> tuple[tuple[bytes, bytes], ...]:
    # os.environ keeps its bytes in `_data` (CPython, every version since 3.2): taking them
    # as they are is a tenth of the cost of walking the mapping, which decodes every entry.
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict):
        return tuple(data.items())
    return tuple(os.environb.items())


@functools.lru_cache(maxsize=16)
def _applied(policy: EnvPolicy, environb: tuple[tuple[bytes, bytes], ...]) -> dict[str, str]:
    return policy.apply({os.fsdecode(k): os.fsdecode(v) for k, v in environb})
