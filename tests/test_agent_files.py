"""The peers' agent files as profiles (DESIGN 3.13): Claude Code's `.claude/agents/*.md`,
Codex's `.codex/agents/*.toml`, Copilot's `.github/agents/*.agent.md` and the seed's
`.subsessions/agents/NAME/` folders, from real files in temporary folders (HOME points at
one for the `~` folders). Running ones go through the engine with the scripted model."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from fake_openai import FakeOpenAI, Recorded, Reply, fake_openai, text
from scripting import Script, script
from tools_support import needs_bwrap

from subsessions import Engine, ScriptedModel, SessionConfig, Tool
from subsessions.config import derive_config
from subsessions.errors import ConfigError
from subsessions.profiles import LoadedProfile, load_profiles
from subsessions.rollouts.reader import find_rollout
from subsessions.settings import settings_from_mapping

__all__ = ["fake_openai", "script"]  # the fixtures, imported so that pytest finds them

BUILTINS = {"tester", "mathematician", "linter_fixer", "default"}
INSTRUCTIONS = "Review the diff and list every bug you find."

CLAUDE = f"""---
name: reviewer
description: Reviews diffs for bugs.
tools: Bash, Read, Grep, WebFetch
model: sonnet
---

{INSTRUCTIONS}
"""
CODEX = f'''name = "reviewer"
description = "Reviews diffs for bugs."
developer_instructions = """{INSTRUCTIONS}"""
model = "gpt-5.1-codex"
sandbox_mode = "read-only"
model_reasoning_effort = "high"
nickname_candidates = ["Ada"]
'''
SEED = f"""---
description: Reviews diffs for bugs.
tools:
  - Read
  - LS
model: opus
---
{INSTRUCTIONS}
"""


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's home directory (`~`), empty unless a test writes to it."""
    folder = tmp_path / "user"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    return folder


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


def config(home: Path, text: str) -> None:
    write(home / "config.toml", text)


def load(home: Path, project: Path) -> dict[str, LoadedProfile]:
    return load_profiles(home, project)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "subsessions" and r.levelno == logging.WARNING]


# -- the same agent in three formats --------------------------------------------------------
def the_reviewer(kind: str, project: Path) -> Path:
    if kind == "claude":
        return write(project / ".claude" / "agents" / "reviewer.md", CLAUDE)
    if kind == "codex":
        return write(project / ".codex" / "agents" / "reviewer.toml", CODEX)
    write(project / ".subsessions" / "agents" / "reviewer" / "SOUL.md", "You are terse.")
    return write(project / ".subsessions" / "agents" / "reviewer" / "AGENTS.md", SEED)


EXPECTED = {  # kind -> (tools, model the child runs on)
    "claude": (("shell", "read_file", "WebFetch"), "aliased-sonnet"),
    "codex": (None, "gpt-5.1-codex"),
    "seed": (("read_file", "list_dir"), "parent-model"),  # opus: no alias, so inherit
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
async def test_the_same_agent_in_each_format_loads_and_runs_as_a_child(
    kind: str, home: Path, project: Path, user: Path, script: Script
) -> None:
    config(home, '[model_aliases]\nsonnet = "aliased-sonnet"\n')
    source = the_reviewer(kind, project)
    entry = load(home, project)["reviewer"]
    tools, model = EXPECTED[kind]
    assert entry.source == str(source)
    assert entry.profile.developer_instructions == INSTRUCTIONS
    assert entry.profile.description == "Reviews diffs for bugs."
    assert entry.profile.tools == tools
    if kind == "codex":
        assert (entry.profile.sandbox, entry.profile.reasoning_effort) == ("read-only", "high")

    web = Tool("WebFetch", "fetches a page", handler=lambda args, inv: "page")
    other = Tool("deploy", "deploys", handler=lambda args, inv: "done")
    async with Engine(home, model_client=script.model, model="engine-model",
                      project_dir=project) as engine:
        top = await engine.create_session(SessionConfig(
            model="parent-model", tools=(web, other), builtin_tools=True,
            sandbox="danger-full-access"))
        cid = await top.subsessions.spawn_child("reviewer", "review this")
        assert await top.subsessions.wait_child(cid) == "answer to review this"
    [request] = script.seen["review this"]
    assert request.instructions == INSTRUCTIONS  # SOUL.md's persona never reaches a child
    assert request.model == model
    names = {spec["name"] for spec in request.tools}
    if tools is None:  # Codex's files name no tools: all of the parent's
        assert {"WebFetch", "deploy", "shell", "apply_patch", "read_file"} <= names
    else:
        assert names & {"WebFetch", "deploy", "shell", "apply_patch", "read_file",
                        "list_dir"} == set(tools)


def test_a_read_only_codex_agent_narrows_the_sandbox_never_widens_it(
    home: Path, project: Path, user: Path
) -> None:
    the_reviewer("codex", project)
    write(project / ".codex" / "agents" / "wide.toml",
          'name = "wide"\nsandbox_mode = "danger-full-access"\n')
    loaded = load(home, project)
    reviewer, wide = loaded["reviewer"].profile, loaded["wide"].profile
    base = SessionConfig(sandbox="workspace-write")
    assert derive_config(base, reviewer).sandbox == "read-only"
    assert derive_config(base, reviewer, model="m", cwd="/").sandbox == "read-only"
    assert wide.sandbox is None
    assert derive_config(base, wide).sandbox == "workspace-write"


@needs_bwrap
async def test_a_read_only_codex_agents_child_cannot_write_the_workspace(
    home: Path, project: Path, user: Path
) -> None:
    """Attacked as the model would: its shell (in bwrap) and apply_patch both try to write
    the parent's workspace, which stays writable to the parent."""
    the_reviewer("codex", project)
    attempts = ScriptedModel(lambda request: [{"type": "function_call", "name": "shell",
                                               "arguments": {"command": ["touch", "by_shell"]}}]
                             if request.instructions.startswith("Review") and not [
                                 i for i in request.items if i.get("type") ==
                                 "function_call_output"] else (
        [{"type": "function_call", "name": "apply_patch", "arguments": {"patch": (
            "*** Begin Patch\n*** Add File: by_patch\n+x\n*** End Patch\n")}}]
        if request.instructions.startswith("Review") and len([
            i for i in request.items if i.get("type") == "function_call_output"]) == 1
        else ["done"]))
    async with Engine(home, model_client=attempts, project_dir=project) as engine:
        parent = await engine.create_session(SessionConfig(
            cwd=str(project), builtin_tools=True, approval="never"))
        cid = await parent.subsessions.spawn_child("reviewer", "review")
        assert await parent.subsessions.wait_child(cid, timeout=60) == "done"
    assert not (project / "by_shell").exists() and not (project / "by_patch").exists()
    outputs = [item["output"] for item in attempts.requests[-1].items
               if item.get("type") == "function_call_output"]
    assert len(outputs) == 2 and all("read-only" in o or "Read-only" in o for o in outputs), (
        outputs)


# -- persona and memory (DESIGN 3.4) ---------------------------------------------------------
async def test_a_seed_folders_persona_and_memory_reach_it_top_level_never_as_a_child(
    home: Path, project: Path, user: Path, script: Script
) -> None:
    folder = project / ".subsessions" / "agents" / "character"
    write(folder / "AGENTS.md", "Play the character.\n")
    write(folder / "SOUL.md", "PERSONA-SECRET: a grumpy pirate.\n")
    write(folder / "MEMORY.md", "MEMORY-SECRET: the treasure is under the oak.\n")
    async with Engine(home, model_client=script.model, project_dir=project) as engine:
        top = await engine.create_session(SessionConfig(), profile="character")
        assert await top.send_and_wait("top") == "answer to top"
        cid = await top.subsessions.spawn_child("character", "as a child")
        await top.subsessions.wait_child(cid)
    [top_request] = script.seen["top"]
    for part in ("Play the character.", "PERSONA-SECRET", "MEMORY-SECRET"):
        assert part in top_request.instructions
    [child] = script.seen["as a child"]
    assert child.instructions == "Play the character."
    assert b"SECRET" not in orjson.dumps([child.instructions, child.items, child.tools])
    assert b"SECRET" not in find_rollout(home, cid).read_bytes()


# -- order and `[profiles] sources` ----------------------------------------------------------
def every_place(home: Path, user: Path, project: Path) -> dict[str, Path]:
    """The agent `dup` defined in every folder, each saying where it lives."""
    places = {
        "home": (home / "profiles" / "dup.toml", 'name = "dup"\ndescription = "home"\n'),
        "user-codex": (user / ".codex" / "agents" / "dup.toml",
                       'name = "dup"\ndescription = "user-codex"\n'),
        "user-claude": (user / ".claude" / "agents" / "dup.md",
                        "---\nname: dup\ndescription: user-claude\n---\nx\n"),
        "project": (project / ".subsessions" / "profiles" / "dup.toml",
                    'name = "dup"\ndescription = "project"\n'),
        "seed": (project / ".subsessions" / "agents" / "dup" / "AGENTS.md",
                 "---\ndescription: seed\n---\nx\n"),
        "codex": (project / ".codex" / "agents" / "dup.toml",
                  'name = "dup"\ndescription = "codex"\n'),
        "claude": (project / ".claude" / "agents" / "dup.md",
                   "---\nname: dup\ndescription: claude\n---\nx\n"),
        "copilot": (project / ".github" / "agents" / "dup.agent.md",
                    "---\ndescription: copilot\n---\nx\n"),
    }
    return {label: write(path, text) for label, (path, text) in places.items()}


def test_later_layers_win_in_the_documented_order(
    home: Path, project: Path, user: Path
) -> None:
    paths = every_place(home, user, project)
    for label in reversed(list(paths)):  # remove the winner: the one before it wins
        entry = load(home, project)["dup"]
        assert (entry.profile.description, entry.source) == (label, str(paths[label]))
        paths[label].unlink()
    assert "dup" not in load(home, project)


def test_profiles_sources_narrows_the_layers(home: Path, project: Path, user: Path) -> None:
    paths = every_place(home, user, project)
    config(home, '[profiles]\nsources = ["codex", "subsessions"]\n')
    loaded = load(home, project)
    assert set(loaded) == {"dup"}  # no built-ins
    assert loaded["dup"].source == str(paths["codex"])
    config(home, '[profiles]\nsources = ["builtin", "claude"]\n')
    loaded = load(home, project)
    assert set(loaded) == BUILTINS | {"dup"}
    assert loaded["dup"].source == str(paths["claude"])
    assert load_profiles(home, project, sources=["copilot"])["dup"].source == str(
        paths["copilot"])


@pytest.mark.parametrize(("text", "problem"), [
    ('[profiles]\nsources = ["claude", "cursor"]\n', "unknown source 'cursor'"),
    ('[profiles]\nsources = "claude"\n', "must be a list of strings"),
    ('[profiles]\nsource = ["claude"]\n', "profiles.source: unknown key"),
    ('[model_aliases]\nsonnet = 3\n', "model_aliases.sonnet: must be a non-empty string"),
    ("profiles = 1\n", "profiles: must be a table"),
])
def test_a_bad_profiles_table_is_one_config_error(
    home: Path, project: Path, text: str, problem: str
) -> None:
    config(home, text)
    with pytest.raises(ConfigError) as caught:
        load(home, project)
    assert problem in str(caught.value) and "\n" not in str(caught.value)


def test_settings_accept_the_profiles_and_model_aliases_tables() -> None:
    settings_from_mapping({"profiles": {"sources": ["claude"]},
                           "model_aliases": {"sonnet": "gpt-5.1"}}, "config.toml")


def test_model_aliases_map_the_peers_model_names(home: Path, project: Path, user: Path) -> None:
    agents = project / ".claude" / "agents"
    for alias in ("sonnet", "opus", "haiku", "inherit", "claude-opus-4-1"):
        write(agents / f"{alias}.md", f"---\nname: a-{alias}\nmodel: {alias}\n---\nx\n")
    models = {name: entry.profile.model for name, entry in load(home, project).items()
              if name.startswith("a-")}
    assert models == {"a-sonnet": "inherit", "a-opus": "inherit", "a-haiku": "inherit",
                      "a-inherit": "inherit", "a-claude-opus-4-1": "claude-opus-4-1"}
    config(home, '[model_aliases]\nsonnet = "gpt-5.1"\nhaiku = "gpt-5.1-mini"\n')
    models = {name: entry.profile.model for name, entry in load(home, project).items()
              if name.startswith("a-")}
    assert (models["a-sonnet"], models["a-haiku"], models["a-opus"]) == (
        "gpt-5.1", "gpt-5.1-mini", "inherit")


def test_claude_tools_map_and_unknown_names_stay(home: Path, project: Path, user: Path) -> None:
    write(user / ".claude" / "agents" / "all.md",
          "---\nname: all\ntools: [Bash, Read, Edit, MultiEdit, Write, Glob, LS, Grep, "
          "'Bash(git:*)', mcp__github__search, Task]\n---\nx\n")
    write(user / ".claude" / "agents" / "star.md", "---\nname: star\ntools: '*'\n---\nx\n")
    loaded = load(home, project)
    assert loaded["all"].profile.tools == (
        "shell", "read_file", "apply_patch", "list_dir", "mcp__github__search", "Task")
    assert loaded["star"].profile.tools is None


# -- what bad files get: one warning line each, the others load ------------------------------
HOSTILE: dict[str, tuple[str, str | bytes, str]] = {  # file, content, reason in the warning
    "huge": ("huge.md", "---\nname: huge\n---\n" + "x" * (1 << 20), "larger than 1 MiB"),
    "binary": ("binary.md", bytes(range(256)) * 4, "cannot read"),
    "list": ("list.md", "---\n- a\n- b\n---\nx\n", "front matter must be a mapping, not a list"),
    "scalar": ("scalar.md", "---\njust words\n---\nx\n", "must be a mapping, not a str"),
    "bad yaml": ("yaml.md", "---\nname: [unclosed\n---\nx\n", "invalid YAML front matter"),
    "no closing": ("open.md", "---\nname: open\nx\n", "no closing '---'"),
    "path name": ("path.md", "---\nname: ../../etc/evil\n---\nx\n", "profile name"),
    "empty name": ("empty.md", "---\nname: ''\n---\nx\n", "profile name"),
    "typed": ("typed.md", "---\nname: typed\ndescription: [1]\n---\nx\n",
              "description must be a string"),
    "tools": ("tools.md", "---\nname: tools\ntools: {a: 1}\n---\nx\n", "tools must be"),
    "deep": ("deep.md", "---\nname: " + "[" * 5000 + "\n---\nx\n", "invalid YAML"),
    "laughs": ("laughs.md", "---\na: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True))
        + "name: laughs\ntools: *i\n---\nx\n", "tools must be"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_broken_claude_file_is_one_warning_and_the_rest_load(
    case: str, home: Path, project: Path, user: Path, caplog: pytest.LogCaptureFixture
) -> None:
    filename, content, reason = HOSTILE[case]
    the_reviewer("claude", project)
    bad = write(project / ".claude" / "agents" / filename, content)
    loaded = load(home, project)
    assert set(loaded) == BUILTINS | {"reviewer"}
    [line] = warnings_of(caplog)
    assert line.startswith(f"subsessions: skipped agent file {bad}: ")
    assert reason in line and "\n" not in line


def test_broken_codex_and_copilot_files_are_skipped_too(
    home: Path, project: Path, user: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(user / ".codex" / "agents" / "bad.toml", "name = \n")
    write(project / ".codex" / "agents" / "sand.toml", 'name = "s"\nsandbox_mode = "root"\n')
    write(project / ".github" / "agents" / "bad.agent.md", "---\n[1, 2]\n---\n")
    write(project / ".github" / "agents" / "good.agent.md", "---\ntools: [Read]\n---\nGood.\n")
    loaded = load(home, project)
    assert set(loaded) == BUILTINS | {"good"}
    assert loaded["good"].profile.developer_instructions == "Good."
    assert [line.split(": ")[1] for line in warnings_of(caplog)] == [
        f"skipped agent file {user / '.codex' / 'agents' / 'bad.toml'}",
        f"skipped agent file {project / '.codex' / 'agents' / 'sand.toml'}",
        f"skipped agent file {project / '.github' / 'agents' / 'bad.agent.md'}",
    ]


def test_symlinks_pointing_outside_are_skipped(
    home: Path, project: Path, user: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outside = write(tmp_path / "outside" / "secret.md", "---\nname: secret\n---\nsecret\n")
    write(tmp_path / "outside" / "agent" / "AGENTS.md", "outside instructions\n")
    (project / ".claude" / "agents").mkdir(parents=True)
    (project / ".claude" / "agents" / "link.md").symlink_to(outside)
    seeds = project / ".subsessions" / "agents"
    seeds.mkdir(parents=True)
    (seeds / "linked").symlink_to(tmp_path / "outside" / "agent")
    write(seeds / "soul" / "AGENTS.md", "mine\n")
    (seeds / "soul" / "SOUL.md").symlink_to(outside)
    loaded = load(home, project)
    assert set(loaded) == BUILTINS
    lines = warnings_of(caplog)
    assert len(lines) == 3
    assert all("symbolic link" in line for line in lines)


def test_a_seed_folder_without_agents_md_is_one_warning(
    home: Path, project: Path, user: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seeds = project / ".subsessions" / "agents"
    write(seeds / "empty" / "SOUL.md", "a soul without instructions\n")
    write(seeds / "README.md", "not an agent\n")
    write(seeds / "ok" / "AGENTS.md", "Fine.\n")
    loaded = load(home, project)
    assert set(loaded) == BUILTINS | {"ok"}
    assert loaded["ok"].profile.persona is None
    [line] = warnings_of(caplog)
    assert line == (f"subsessions: skipped agent file {seeds / 'empty'}: "
                    "no AGENTS.md in the agent folder")


def test_duplicate_names_resolve_the_same_way_every_time(
    home: Path, project: Path, user: Path
) -> None:
    agents = project / ".claude" / "agents"
    write(agents / "b.md", "---\nname: twin\ndescription: b\n---\nx\n")
    write(agents / "a.md", "---\nname: twin\ndescription: a\n---\nx\n")
    write(user / ".claude" / "agents" / "z.md", "---\nname: twin\ndescription: user\n---\nx\n")
    for _ in range(3):  # sorted file order within a folder, the project over the user
        assert load(home, project)["twin"].profile.description == "b"


def test_our_own_toml_profiles_stay_strict(home: Path, project: Path, user: Path) -> None:
    from subsessions.errors import ProfileError

    the_reviewer("claude", project)
    write(project / ".subsessions" / "profiles" / "bad.toml", 'name = "x"\ncolor = "red"\n')
    with pytest.raises(ProfileError, match="unknown key 'color'"):
        load(home, project)


# -- the command line ------------------------------------------------------------------------
def cli(*args: str, cwd: Path, user: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(user), "SUBSESSIONS_HOME": str(cwd / "default-home")}
    return subprocess.run([sys.executable, "-m", "subsessions", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_profiles_list_shows_each_source_file_and_one_warning_line(
    home: Path, project: Path, user: Path
) -> None:
    claude = the_reviewer("claude", project)
    codex = write(user / ".codex" / "agents" / "planner.toml",
                  'name = "planner"\ndescription = "Plans."\n')
    write(project / ".claude" / "agents" / "broken.md", "---\n- not a mapping\n---\n")
    result = cli("profiles", "list", "--home", str(home), cwd=project, user=user)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert str(claude) in rows["reviewer"] and str(codex) in rows["planner"]
    assert "builtin" in rows["tester"]
    [line] = result.stderr.splitlines()
    assert "broken.md" in line and "front matter must be a mapping" in line


def test_profiles_show_lists_host_tools_and_the_codex_extras(
    home: Path, project: Path, user: Path
) -> None:
    the_reviewer("claude", project)
    result = cli("profiles", "show", "reviewer", "--home", str(home), cwd=project, user=user)
    assert result.returncode == 0, result.stderr
    assert "tools: ['shell', 'read_file', 'WebFetch']" in result.stdout
    assert "host tools (not built in): WebFetch" in result.stdout
    (project / ".claude" / "agents" / "reviewer.md").unlink()
    the_reviewer("codex", project)
    result = cli("profiles", "show", "reviewer", "--home", str(home), cwd=project, user=user)
    assert "sandbox: read-only\nreasoning_effort: high\n" in result.stdout


async def test_a_batch_runs_a_claude_agent_and_warns_once_of_a_broken_file(
    fake_openai: FakeOpenAI, home: Path, project: Path, user: Path
) -> None:
    """`subsessions batch` reads the profiles once: one warning line, not one per reader."""
    seen: list[Recorded] = []

    def answer(request: Recorded) -> Reply:
        seen.append(request)
        return text("done")

    fake_openai.script = answer
    the_reviewer("claude", project)
    config(home, '[model_aliases]\nsonnet = "m-sonnet"\n')
    write(project / ".claude" / "agents" / "broken.md", "---\n- not a mapping\n---\n")
    write(project / "items.csv", "diff\nA\n")
    env = {**os.environ, "HOME": str(user)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subsessions", "batch", "items.csv", "--profile", "reviewer",
        "--prompt", "Review {diff}", "--out", "out.jsonl", "--home", str(home),
        "--base-url", fake_openai.base_url, "--model", "m", "--wire-api", "responses",
        cwd=project, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), 50)
    assert process.returncode == 0, err.decode()
    warned = [line for line in err.decode().splitlines() if "skipped agent file" in line]
    assert len(warned) == 1 and "broken.md" in warned[0]
    [request] = [r for r in seen if r.body.get("instructions") == INSTRUCTIONS]
    assert request.body["model"] == "m-sonnet"


def test_isolation_comes_from_a_claude_file_and_our_toml_and_a_bad_one_is_refused(
    home: Path, project: Path, user: Path
) -> None:
    from subsessions.errors import ProfileError

    write(project / ".claude" / "agents" / "apart.md",
          "---\nname: apart\ndescription: works apart\nisolation: worktree\n---\nWork apart.\n")
    write(project / ".subsessions" / "profiles" / "ours.toml",
          'name = "ours"\nisolation = "worktree"\n')
    loaded = load(home, project)
    assert loaded["apart"].profile.isolation == loaded["ours"].profile.isolation == "worktree"
    write(project / ".subsessions" / "profiles" / "bad.toml",
          'name = "bad"\nisolation = "elsewhere"\n')
    with pytest.raises(ProfileError, match="isolation must be 'worktree' or None"):
        load(home, project)
