"""The peers' agent files as profiles: Claude Code's `.claude/agents/*.md`,
Codex's `.codex/agents/*.toml` and Copilot's `.github/agents/*.agent.md`.

Users arrive with these files; rewriting each as our TOML is the chore this removes. The
peers' own keys we have no use for are ignored (their formats grow), but a key we read with
the wrong type is an error, and the caller skips the file with one warning."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

from subsessions.errors import ProfileError
from subsessions.profiles.base import Profile
from subsessions.profiles.frontmatter import one_line, split_front_matter

# Claude Code's tool names -> ours; a name not here stays as written (a host's tool, or an
# MCP tool: Claude's `mcp__server__tool` is our naming too).
CLAUDE_TOOLS = {
    "Bash": "shell", "Read": "read_file", "Edit": "apply_patch", "MultiEdit": "apply_patch",
    "Write": "apply_patch", "Glob": "list_dir", "LS": "list_dir", "Grep": "shell",
}
# Claude Code's model aliases: through `[model_aliases]` in config.toml, else the parent's.
MODEL_ALIASES = ("sonnet", "opus", "haiku", "inherit")
CODEX_SANDBOXES = ("read-only", "workspace-write", "danger-full-access")


def claude_profile(text: str, source: str, stem: str, aliases: Mapping[str, str]) -> Profile:
    """A Claude Code agent file: front matter `name`, `description`, `tools`, `model` and
    `isolation` (`worktree`, as Claude Code's Agent tool takes it); the body is the developer
    instructions. Copilot's custom agents share the shape."""
    meta, body = split_front_matter(text, source)
    return build(
        source, name=_name(meta, stem, source), description=_text(meta, "description", source),
        developer_instructions=body.strip(), model=model_of(meta.get("model"), aliases, source),
        tools=tools_of(meta.get("tools"), source),
        isolation=_text(meta, "isolation", source, None),
    )


copilot_profile = claude_profile  # `.github/agents/NAME.agent.md`: front matter and body


def codex_profile(text: str, source: str, stem: str, aliases: Mapping[str, str]) -> Profile:
    """A Codex agent file: `name`, `description`, `developer_instructions`, `model`,
    `sandbox_mode` (`read-only` narrows ours; the others leave the parent's) and
    `model_reasoning_effort`."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(source, f"invalid TOML: {one_line(str(exc))}") from None
    sandbox = _text(data, "sandbox_mode", source, None)
    if sandbox is not None and sandbox not in CODEX_SANDBOXES:
        raise ProfileError(source, f"sandbox_mode must be one of {', '.join(CODEX_SANDBOXES)}, "
                                   f"not {sandbox!r:.40}")
    return build(
        source, name=_name(data, stem, source), description=_text(data, "description", source),
        developer_instructions=(_text(data, "developer_instructions", source) or "").strip(),
        model=model_of(data.get("model"), aliases, source),
        sandbox="read-only" if sandbox == "read-only" else None,
        reasoning_effort=_text(data, "model_reasoning_effort", source, None),
    )


def build(source: str, **fields: Any) -> Profile:
    """The profile, or a `ProfileError` naming `source` (a bad name, say)."""
    try:
        return Profile(**fields)
    except (ValueError, TypeError) as exc:
        raise ProfileError(source, str(exc)) from None


def tools_of(value: object, source: str) -> tuple[str, ...] | None:
    """`tools` as a comma list or a YAML list, in our names; absent or `*`: all of the
    parent's tools. `Bash(git:*)`-style patterns count as their tool."""
    if value is None:
        return None
    if isinstance(value, str):
        names = value.split(",")
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        names = value
    else:
        raise ProfileError(source, "tools must be a comma list or a list of strings")
    cleaned = [name.partition("(")[0].strip() for name in names]
    if "*" in cleaned:
        return None
    return tuple(dict.fromkeys(CLAUDE_TOOLS.get(name, name) for name in cleaned if name))


def model_of(value: object, aliases: Mapping[str, str], source: str) -> str:
    """A peer's model: through `[model_aliases]`, a Claude alias without one is `inherit`
    (the parent's model), any other id is kept."""
    if value is None:
        return "inherit"
    if not isinstance(value, str) or not value.strip():
        raise ProfileError(source, "model must be a non-empty string")
    model = value.strip()
    if model in aliases:
        return aliases[model]
    return "inherit" if model in MODEL_ALIASES else model


def _name(data: Mapping[str, Any], stem: str, source: str) -> str:
    """The file's `name`, else its stem (Copilot names agents by file)."""
    if "name" not in data:
        return stem
    name = data["name"]
    if not isinstance(name, str):
        raise ProfileError(source, f"name must be a string, not {type(name).__name__}")
    return name


def _text(data: Mapping[str, Any], key: str, source: str,
          default: str | None = "") -> str | None:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ProfileError(source, f"{key} must be a string, not {type(value).__name__}")
    return value
