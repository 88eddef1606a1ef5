"""`subsessions profiles list|show`: the profiles a session here would see, and where
each comes from."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TextIO

from subsessions.errors import SubsessionError


def show_profiles(args: argparse.Namespace, home: Path, out: TextIO) -> int:
    from subsessions.config import BUILTIN_TOOL_NAMES, RESERVED_TOOL_NAMES
    from subsessions.profiles import load_profiles

    loaded = load_profiles(home, os.getcwd())
    if args.action == "list":
        for name, entry in loaded.items():
            out.write(f"{name:<16} {entry.source:<10} {entry.profile.description}\n")
        return 0
    if args.name not in loaded:
        raise SubsessionError(f"no profile named {args.name!r}; have: {', '.join(loaded)}")
    entry = loaded[args.name]
    profile = entry.profile
    out.write(f"name: {profile.name}\nsource: {entry.source}\ndescription: {profile.description}\n")
    out.write(f"model: {profile.model}\nfallback_models: {list(profile.fallback_models)}\n")
    tools = "all of the parent's" if profile.tools is None else list(profile.tools)
    out.write(f"tools: {tools}\nmax_turns: {profile.max_turns}\n")
    known = set(BUILTIN_TOOL_NAMES) | RESERVED_TOOL_NAMES
    host = [name for name in profile.tools or () if name not in known]
    if host:  # a peer's tool we have no built-in for: the host must offer it
        out.write(f"host tools (not built in): {', '.join(host)}\n")
    for label, value in (("sandbox", profile.sandbox), ("isolation", profile.isolation),
                         ("reasoning_effort", profile.reasoning_effort),
                         ("a2a_url (a remote A2A agent)", profile.a2a_url),
                         ("a2a_token_env", profile.a2a_token_env)):
        if value is not None:
            out.write(f"{label}: {value}\n")
    out.write(f"developer_instructions:\n{profile.developer_instructions}")
    for label in ("persona", "memory"):
        text = getattr(profile, label)
        if text:
            out.write(f"{label} (top-level only):\n{text}\n")
    return 0
