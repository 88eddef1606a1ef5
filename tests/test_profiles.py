"""Profiles: built-ins, layering by name, and one-line errors for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from subsessions.config import SessionConfig, derive_config
from subsessions.errors import ProfileError
from subsessions.profiles import Profile, load_profiles, parse_profile

BUILTINS = {"tester", "mathematician", "linter_fixer", "default"}


def write(folder: Path, filename: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    path.write_text(text, encoding="utf-8")
    return path


def test_load_profiles_none_gives_just_the_builtins() -> None:
    loaded = load_profiles(None)
    assert set(loaded) == BUILTINS
    assert all(entry.source == "builtin" for entry in loaded.values())


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_builtins_have_instructions_and_descriptions(name: str) -> None:
    profile = load_profiles()[name].profile
    assert profile.name == name
    assert profile.developer_instructions.strip()
    assert profile.description.strip()
    assert profile.max_turns >= 1
    assert profile.model == "inherit"


def test_builtin_tool_allowlists() -> None:
    loaded = load_profiles()
    assert loaded["mathematician"].profile.tools == ()
    assert loaded["default"].profile.tools is None  # all of the parent's tools
    assert "shell" in (loaded["tester"].profile.tools or ())


def test_home_file_overrides_a_builtin_by_name(home: Path) -> None:
    path = write(home / "profiles", "mine.toml", 'name = "tester"\ndescription = "home tester"\n')
    loaded = load_profiles(home)
    assert loaded["tester"].profile.description == "home tester"
    assert loaded["tester"].source == str(path)
    assert set(loaded) == BUILTINS


def test_home_file_adds_a_new_profile(home: Path) -> None:
    write(home / "profiles", "poet.toml", 'name = "poet"\ntools = []\nmax_turns = 3\n')
    poet = load_profiles(home)["poet"].profile
    assert (poet.tools, poet.max_turns, poet.model) == ((), 3, "inherit")


def test_project_overrides_home(home: Path, tmp_path: Path) -> None:
    write(home / "profiles", "a.toml", 'name = "tester"\ndescription = "home"\n')
    write(home / "profiles", "b.toml", 'name = "only_home"\n')
    project = tmp_path / "project"
    path = write(
        project / ".subsessions" / "profiles", "z.toml", 'name = "tester"\ndescription = "proj"\n'
    )
    loaded = load_profiles(home, project)
    assert loaded["tester"].profile.description == "proj"
    assert loaded["tester"].source == str(path)
    assert "only_home" in loaded
    assert loaded["default"].source == "builtin"


def test_missing_folders_are_fine(tmp_path: Path) -> None:
    assert set(load_profiles(tmp_path / "nope", tmp_path / "nope2")) == BUILTINS


def test_non_toml_files_are_ignored(home: Path) -> None:
    write(home / "profiles", "notes.txt", "this is not toml = = =")
    assert set(load_profiles(home)) == BUILTINS


def test_full_profile_file_is_parsed() -> None:
    profile = parse_profile(
        """
name = "full"
description = "d"
model = "gpt-x"
fallback_models = ["gpt-y", "gpt-z"]
developer_instructions = "do it"
tools = ["shell"]
max_turns = 5
persona = "p"
memory = "m"
""",
        "full.toml",
    )
    assert profile == Profile(
        name="full",
        description="d",
        model="gpt-x",
        fallback_models=("gpt-y", "gpt-z"),
        developer_instructions="do it",
        tools=("shell",),
        max_turns=5,
        persona="p",
        memory="m",
    )


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ('name = "x"\nmax_turns = \n', "TOML"),
        ('name = "x\n', "TOML"),
        ('name = "x"\ncolour = "red"\n', "colour"),
        ('name = "x"\nmax_turns = "x"\n', "max_turns"),
        ('name = "x"\nmax_turns = true\n', "max_turns"),
        ('name = "x"\nmax_turns = 2.5\n', "max_turns"),
        ('name = "x"\nmax_turns = 0\n', "max_turns"),
        ('name = "x"\nmax_turns = -3\n', "max_turns"),
        ('name = "x"\ntools = "shell"\n', "tools"),
        ('name = "x"\ntools = [1]\n', "tools"),
        ('name = "x"\nfallback_models = "gpt"\n', "fallback_models"),
        ('name = "x"\ndescription = 3\n', "description"),
        ('name = "x"\npersona = ["a"]\n', "persona"),
        ('description = "no name"\n', "name"),
        ('name = "../x"\n', "name"),
        ('name = ""\n', "name"),
        ('name = "a b"\n', "name"),
        ('name = "1abc"\n', "name"),
        (f'name = "{"n" * 65}"\n', "name"),
        ("name = 7\n", "name"),
        ('name = "x"\n[tools]\nshell = true\n', "tools"),
    ],
)
def test_bad_file_gives_one_line_naming_file_and_problem(home: Path, text: str, hint: str) -> None:
    path = write(home / "profiles", "bad.toml", text)
    with pytest.raises(ProfileError) as caught:
        load_profiles(home)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    assert hint in message.removeprefix(f"{path}: ")
    assert caught.value.source == str(path)


def test_bad_project_file_names_the_project_file(home: Path, tmp_path: Path) -> None:
    path = write(tmp_path / "p" / ".subsessions" / "profiles", "x.toml", "max_turns = 1\n")
    with pytest.raises(ProfileError, match=r"missing required key 'name'") as caught:
        load_profiles(home, tmp_path / "p")
    assert str(caught.value).startswith(f"{path}: ")


def test_undecodable_file_is_a_profile_error(home: Path) -> None:
    folder = home / "profiles"
    folder.mkdir(parents=True)
    (folder / "bin.toml").write_bytes(b'name = "\xff\xfe"\n')
    with pytest.raises(ProfileError) as caught:
        load_profiles(home)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(str(folder / "bin.toml"))


def test_persona_and_memory_reach_a_top_level_config_and_never_a_childs() -> None:
    """`derive_config` is the one place this is decided (DESIGN 3.4)."""
    profile = Profile(name="p", developer_instructions="i", tools=("shell",), max_turns=3,
                      persona="secret persona", memory="secret memory")
    top = derive_config(SessionConfig(instructions="base"), profile)
    assert top.instructions == "base\n\ni\n\nsecret persona\n\nsecret memory"
    child = derive_config(SessionConfig(instructions="the parent's"), profile, model="m")
    assert child.instructions == "i"
    assert "secret" not in repr(child)
    assert (child.model, child.max_turns) == ("m", 3)
    assert profile.persona == "secret persona"  # the profile itself is untouched


def test_profile_defaults_match_the_design() -> None:
    profile = Profile(name="x")
    assert (profile.model, profile.fallback_models, profile.tools, profile.max_turns) == (
        "inherit",
        (),
        None,
        24,
    )
    assert (profile.persona, profile.memory, profile.description) == (None, None, "")


def test_our_toml_takes_sandbox_reasoning_effort_and_isolation() -> None:
    from subsessions.errors import ProfileError
    from subsessions.profiles.base import parse_profile

    made = parse_profile('name = "r"\nsandbox = "read-only"\nreasoning_effort = "low"\n'
                         'isolation = "worktree"\n', "r.toml")
    assert (made.sandbox, made.reasoning_effort, made.isolation) == (
        "read-only", "low", "worktree")
    with pytest.raises(ProfileError, match="sandbox must be 'read-only' or None"):
        parse_profile('name = "r"\nsandbox = "danger-full-access"\n', "r.toml")
