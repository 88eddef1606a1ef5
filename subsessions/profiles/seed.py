"""A seed's agent folder, `.subsessions/agents/NAME/`: `AGENTS.md` the
instructions (optional front matter as in Claude Code's files), `SOUL.md` the persona and
`MEMORY.md` the memory. Persona and memory land in the profile's own fields, so they follow
the same rule as a TOML profile's do: a top-level session gets them, a child never does."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from subsessions.errors import ProfileError
from subsessions.profiles.base import Profile, read_profile_file
from subsessions.profiles.frontmatter import split_front_matter
from subsessions.profiles.peers import build, model_of, tools_of

INSTRUCTIONS, PERSONA, MEMORY = "AGENTS.md", "SOUL.md", "MEMORY.md"


def seed_profile(folder: Path, aliases: Mapping[str, str]) -> Profile:
    """The folder's profile, named as the folder unless AGENTS.md's front matter says."""
    if folder.is_symlink():  # it may point anywhere: its files are not the project's
        raise ProfileError(str(folder), "a symbolic link, not a folder")
    agents = folder / INSTRUCTIONS
    source = str(agents)
    if not agents.exists() and not agents.is_symlink():
        raise ProfileError(str(folder), f"no {INSTRUCTIONS} in the agent folder")
    meta, body = split_front_matter(read_profile_file(agents), source)
    name = meta.get("name", folder.name)
    if not isinstance(name, str):
        raise ProfileError(source, f"name must be a string, not {type(name).__name__}")
    description = meta.get("description", "")
    if not isinstance(description, str):
        raise ProfileError(source, "description must be a string")
    return build(
        source, name=name, description=description, developer_instructions=body.strip(),
        model=model_of(meta.get("model"), aliases, source),
        tools=tools_of(meta.get("tools"), source),
        persona=_optional(folder / PERSONA), memory=_optional(folder / MEMORY),
    )


def _optional(path: Path) -> str | None:
    """An optional file's text (None when absent or blank); unreadable is an error."""
    if not path.exists() and not path.is_symlink():
        return None
    return read_profile_file(path).strip() or None
