"""Markdown with YAML front matter (Claude Code's and Copilot's agent files, a seed's
AGENTS.md): the mapping between the `---` lines and the body after them.

Parsed with `yaml.safe_load` only: these files come from whoever wrote the project, and
the full loader would build arbitrary Python objects from them."""

from __future__ import annotations

from typing import Any

import yaml

from subsessions.errors import ProfileError

_FENCE = "---"


def split_front_matter(text: str, source: str) -> tuple[dict[str, Any], str]:
    """(front matter, body); a file without front matter is all body. Every problem is a
    `ProfileError` naming `source`."""
    text = text.removeprefix("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != _FENCE:
        return {}, text
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() == _FENCE:
            head, body = "".join(lines[1:index]), "".join(lines[index + 1:])
            break
    else:
        raise ProfileError(source, "front matter has no closing '---' line")
    try:
        data = yaml.safe_load(head)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:  # RecursionError: [[[[...
        raise ProfileError(source, f"invalid YAML front matter: {one_line(str(exc))}") from None
    if data is None:
        return {}, body
    if not isinstance(data, dict):
        raise ProfileError(source, f"front matter must be a mapping, not {_kind(data)}")
    return data, body


def one_line(text: str, limit: int = 200) -> str:
    """A parser's message (YAML's span several lines) as one short line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _kind(value: object) -> str:
    return "a list" if isinstance(value, list) else f"a {type(value).__name__}"
