"""Profiles: the presets children are spawned from, loaded in layers.

Layers, later wins by name: the built-ins shipped in this package, then the user's folders
(`$SUBSESSIONS_HOME/profiles/*.toml`, `~/.codex/agents`, `~/.claude/agents`), then a
project's (`.subsessions/profiles/*.toml`, `.subsessions/agents/NAME/`, `.codex/agents`,
`.claude/agents`, `.github/agents`). `base` holds the profile and our TOML files, `layers`
the order, `peers` and `seed` the other tools' agent files.
"""

from subsessions.profiles.base import (
    PROFILE_SANDBOXES,
    LoadedProfile,
    Profile,
    builtin_profiles,
    check_tool_choice,
    load_profile_dir,
    parse_profile,
    profile_from_mapping,
    profile_namespace,
    read_profile_file,
    resolve_profile,
)
from subsessions.profiles.layers import load_profiles

__all__ = [
    "PROFILE_SANDBOXES",
    "LoadedProfile",
    "Profile",
    "builtin_profiles",
    "check_tool_choice",
    "load_profile_dir",
    "load_profiles",
    "parse_profile",
    "profile_from_mapping",
    "profile_namespace",
    "read_profile_file",
    "resolve_profile",
]
