"""What a profile is, and our own TOML profile files (strict: a bad file is an error).

The order the layers load in, the peers' agent files among them, is `layers`'."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from attrs import field, frozen

from subsessions._util.safe_read import NotReadable, read_regular
from subsessions._util.urls import url_problem
from subsessions.budget import Budget, parse_budget
from subsessions.errors import InvalidArguments, ProfileError, UnknownSessionType

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
_MAX_PROFILE_BYTES = 1 << 20
# A profile may narrow its sandbox, never widen it: a project's file asking for full access
# must not get it (Codex's `sandbox_mode = "read-only"`); None is the parent's sandbox.
PROFILE_SANDBOXES = (None, "read-only")


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"expected a list of strings, not {value!r:.80}")
    return tuple(value)


def _as_tuple(value: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if value is None else _strings(value)


A2A_MODEL_PREFIX = "a2a:"
A2A_TOKEN_MARK = ";token_env="
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _check_remote(url: object, token_env: object) -> None:
    if url is None:
        if token_env is not None:
            raise ValueError("a2a_token_env needs a2a_url")
        return
    if not isinstance(url, str) or url_problem(url) is not None or A2A_TOKEN_MARK in url:
        raise ValueError(f"a2a_url must be an http(s) URL, not {url!r:.80}")
    if token_env is not None and (not isinstance(token_env, str)
                                  or not _ENV_NAME.fullmatch(token_env)):
        raise ValueError(f"a2a_token_env must name an environment variable, not "
                         f"{token_env!r:.60}")


def check_tool_choice(choice: object) -> None:
    """`tool_choice`: `auto`, `required`, `none`, or the name of the one tool to call."""
    if not isinstance(choice, str) or not choice.strip():
        raise ValueError(f"tool_choice must be auto, required, none or a tool's name, "
                         f"not {choice!r:.60}")


@frozen
class Profile:
    """A preset: what a child is told, which model it runs, which tools it gets.

    `tools=None` gives the child all of its parent's tools, `()` none.
    `persona` and `memory` reach the model only when the profile runs top-level
    (`config.derive_config` is the one place that decides it).
    """

    name: str
    description: str = ""
    developer_instructions: str = ""
    model: str = "inherit"
    fallback_models: tuple[str, ...] = field(default=(), converter=_strings)
    tools: tuple[str, ...] | None = field(default=None, converter=_as_tuple)
    max_turns: int = 24
    persona: str | None = None
    memory: str | None = None
    budget: Budget | None = None  # a child's own limits (a top-level session's: its tree's)
    tool_choice: str = "auto"  # auto | required | none | a tool's name (for its first call)
    sandbox: str | None = None  # "read-only", or None: the parent's (see PROFILE_SANDBOXES)
    reasoning_effort: str | None = None  # Codex's model_reasoning_effort, kept as read
    isolation: str | None = None  # "worktree": each child in a git worktree of its own
    # a remote A2A agent as the child: its URL, and the variable holding its
    # bearer token (never the token itself: profiles are shared files)
    a2a_url: str | None = None
    a2a_token_env: str | None = None

    def __attrs_post_init__(self) -> None:
        check_tool_choice(self.tool_choice)
        _check_remote(self.a2a_url, self.a2a_token_env)
        if self.sandbox not in PROFILE_SANDBOXES:
            raise ValueError(f"sandbox must be 'read-only' or None, not {self.sandbox!r:.40}")
        if self.isolation not in (None, "worktree"):
            raise ValueError(f"isolation must be 'worktree' or None, not {self.isolation!r:.40}")
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"profile name {self.name!r} must start with a letter and use only "
                "letters, digits, '_' and '-' (at most 64 characters)"
            )
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int):
            raise ValueError("max_turns must be an integer")
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if self.budget is not None and not isinstance(self.budget, Budget):
            raise ValueError(f"budget must be a Budget or None, not {self.budget!r:.60}")

    @property
    def remote_model(self) -> str | None:
        """The model id a remote agent's child runs on (`a2a:URL`, and `;token_env=NAME`):
        the model client routes it to the agent, and its rollouts name the agent."""
        if self.a2a_url is None:
            return None
        token = f"{A2A_TOKEN_MARK}{self.a2a_token_env}" if self.a2a_token_env else ""
        return f"{A2A_MODEL_PREFIX}{self.a2a_url}{token}"

    def allows(self, tool_name: str) -> bool:
        """Whether the allowlist admits a tool: `None` all, `()` none, a list only those."""
        return self.tools is None or tool_name in self.tools



@frozen
class LoadedProfile:
    """A loaded profile and where it came from: `builtin` or the file's path."""

    profile: Profile
    source: str  # "builtin" or the file it came from (a seed folder's AGENTS.md)


# key -> (accepted python types, description for errors)
_SCHEMA: dict[str, tuple[tuple[type, ...], str]] = {
    "name": ((str,), "a string"),
    "description": ((str,), "a string"),
    "developer_instructions": ((str,), "a string"),
    "model": ((str,), "a string"),
    "fallback_models": ((list,), "a list of strings"),
    "tools": ((list,), "a list of strings"),
    "max_turns": ((int,), "an integer"),
    "persona": ((str,), "a string"),
    "memory": ((str,), "a string"),
    "budget": ((dict,), "a table"),
    "tool_choice": ((str,), "a string"),
    "isolation": ((str,), "a string"),
    "sandbox": ((str,), "a string"),
    "reasoning_effort": ((str,), "a string"),
    "a2a_url": ((str,), "a string"),
    "a2a_token_env": ((str,), "a string"),
}


def parse_profile(text: str, source: str) -> Profile:
    """Parse one profile file's text; every problem is one line naming `source`."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(source, f"invalid TOML: {exc}") from None
    return profile_from_mapping(data, source)


def profile_from_mapping(data: Mapping[str, Any], source: str) -> Profile:
    for key, value in data.items():
        if key not in _SCHEMA:
            raise ProfileError(source, f"unknown key {key!r}; allowed: {', '.join(_SCHEMA)}")
        types, wanted = _SCHEMA[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise ProfileError(source, f"{key} must be {wanted}, not {type(value).__name__}")
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            raise ProfileError(source, f"{key} must be {wanted}")
    if "name" not in data:
        raise ProfileError(source, "missing required key 'name'")
    data = dict(data)
    if "budget" in data:
        try:
            data["budget"] = parse_budget(data["budget"], "budget")
        except InvalidArguments as exc:
            raise ProfileError(source, exc.problem) from None
    try:
        return Profile(**data)
    except ValueError as exc:
        raise ProfileError(source, str(exc)) from None


def builtin_profiles() -> dict[str, LoadedProfile]:
    found: dict[str, LoadedProfile] = {}
    folder = resources.files("subsessions.profiles").joinpath("builtin")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            profile = parse_profile(entry.read_text(encoding="utf-8"), f"builtin:{entry.name}")
            found[profile.name] = LoadedProfile(profile, "builtin")
    return found


def load_profile_dir(folder: Path) -> dict[str, LoadedProfile]:
    found: dict[str, LoadedProfile] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.toml")):
        profile = parse_profile(read_profile_file(path), str(path))
        found[profile.name] = LoadedProfile(profile, str(path))
    return found


def read_profile_file(path: Path) -> str:
    """A profile file's text: a project's profiles come from whoever wrote the project, so a
    link to `/dev/zero` or a FIFO must be one error, not an exhausted memory or a hang."""
    try:
        data = read_regular(path, _MAX_PROFILE_BYTES)
    except (OSError, NotReadable) as exc:
        raise ProfileError(str(path), str(exc) if isinstance(exc, NotReadable)
                           else f"cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(str(path), f"cannot read: {exc}") from None


def profile_namespace(
    loaded: Mapping[str, LoadedProfile], custom: Iterable[Profile]
) -> dict[str, Profile]:
    """The profiles a tree can use by name: the loaded ones, then the root's custom agents."""
    found = {name: lp.profile for name, lp in loaded.items()}
    found.update({p.name: p for p in custom})
    return dict(sorted(found.items()))


def resolve_profile(chosen: str | Profile, known: Mapping[str, Profile]) -> Profile:
    """A profile given by name (looked up in `known`) or as itself."""
    if isinstance(chosen, Profile):
        return chosen
    if chosen not in known:
        raise UnknownSessionType(str(chosen), tuple(known))
    return known[chosen]
