"""The tools `subsessions mcp` serves, as MCP definitions built from the profiles alone.

A host's first turn has only the tools listed by then (the Codex CLI sends its first model
request a short grace after `tools/list`), so over stdio `tools/list` is answered from these
while the model client and the engine are still being built (`subsessions.mcp.front`). They
need nothing but the profiles' names and descriptions, read from TOML: `Catalog` reads them
once, checking the home first as the engine does, and the engine is then built on those
same profiles, so what was listed is what is served.

Light on purpose: the MCP types, the tool schemas and the profile loader, nothing that runs
sessions (no engine, no model client).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mcp_types as types
from attrs import define, field

from subsessions._core import specs
from subsessions.profiles import LoadedProfile, Profile, load_profiles
from subsessions.rollouts.files import secure_home

TOOL_NAMES = ("create_session", "wait_session", "wait_sessions", "cancel_session",
              "run_session", "run_sessions", "list_sessions", "send_message")
RUN = "run_session"
RUN_DESCRIPTION = (
    "Run one sub-session from a profile to its end and return its final message (with "
    "progress notifications while it runs). Clients that negotiate MCP Tasks get a task at "
    "once instead. `budget` limits its turns, tokens and seconds."
)
RUNS = "run_sessions"
RUNS_TASKS = "Clients that negotiate MCP Tasks get one task for the whole run at once."
LIST_SCHEMA: dict[str, Any] = {"type": "object", "properties": {},
                               "additionalProperties": False}
LIST_DESCRIPTION = ("The sub-sessions started on this connection, oldest first: id, profile, "
                    "status, live usage (tokens, turns, tool calls), seconds running, the last "
                    "message so far, the error of a failed one, and the rollout:// URI of each "
                    "transcript.")


def run_schema(profile_names: list[str]) -> dict[str, Any]:
    """`create_session`'s schema, `budget` optional (MCP callers may omit it)."""
    create = specs.create_schema(profile_names)
    return {**create, "required": ["session_type", "prompt"]}


def definitions(profiles: Mapping[str, Profile]) -> list[types.Tool]:
    """The tools, in `TOOL_NAMES` order, their enums and descriptions naming `profiles`."""
    names = sorted(profiles)
    ordered = {name: profiles[name] for name in names}
    found = {s["name"]: s for s in specs.tool_specs(ordered)}
    described: dict[str, tuple[str, dict[str, Any]]] = {
        name: (spec["description"], spec["parameters"]) for name, spec in found.items()}
    described["create_session"] = (described["create_session"][0], run_schema(names))
    described[RUN] = (RUN_DESCRIPTION, run_schema(names))
    described[RUNS] = (f"{described[RUNS][0]} {RUNS_TASKS}", described[RUNS][1])
    described["list_sessions"] = (LIST_DESCRIPTION, LIST_SCHEMA)
    return [types.Tool(name=name, description=described[name][0],
                       input_schema=described[name][1]) for name in TOOL_NAMES]


@define
class Catalog:
    """The profiles of a home and a project folder, read once, and the tools they make."""

    home: Path
    project_dir: str = field(factory=os.getcwd)
    _profiles: dict[str, LoadedProfile] | None = field(default=None, init=False)

    def profiles(self) -> dict[str, LoadedProfile]:
        """Read on first use; a home another user could write, or a bad profile file, is
        the engine's own error (`UnsafeHome`, `ProfileError`), raised on every use."""
        if self._profiles is None:
            secure_home(self.home)
            self._profiles = load_profiles(self.home, self.project_dir)
        return self._profiles

    def tools(self) -> types.ListToolsResult:
        return types.ListToolsResult(tools=definitions(
            {name: loaded.profile for name, loaded in self.profiles().items()}))
