"""The order profiles load in, and what `config.toml` says of it.

Later wins by name: built-ins; the user's folders (ours, then `~/.codex/agents`,
`~/.claude/agents`); the project's (ours: `.subsessions/profiles` and the seed folders
`.subsessions/agents/NAME/`, then `.codex/agents`, `.claude/agents`, `.github/agents`).
Inside a folder, files load in sorted order, so a duplicate name resolves the same way on
every run. `[profiles] sources` keeps only the layers it names; `[model_aliases]` maps the
peers' model names. A peer's file that does not parse is skipped with one warning line."""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from attrs import field, frozen

from subsessions._util.safe_read import NotReadable, read_regular
from subsessions.errors import ConfigError, ProfileError
from subsessions.profiles.base import (
    LoadedProfile,
    Profile,
    builtin_profiles,
    load_profile_dir,
    read_profile_file,
)
from subsessions.profiles.peers import claude_profile, codex_profile, copilot_profile
from subsessions.profiles.seed import seed_profile

log = logging.getLogger("subsessions")

SOURCE_WORDS = ("builtin", "subsessions", "codex", "claude", "copilot")
Parse = Callable[[str, str, str, Mapping[str, str]], Profile]  # text, source, stem, aliases


def _words(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


def _aliases(value: Mapping[str, str]) -> Mapping[str, str]:
    return dict(value)


@frozen
class ProfileOptions:
    """`[profiles] sources` (the layers to read) and `[model_aliases]` of `config.toml`."""

    sources: frozenset[str] = field(default=frozenset(SOURCE_WORDS), converter=_words)
    model_aliases: Mapping[str, str] = field(factory=dict, converter=_aliases)


def load_profiles(
    home: Path | str | None = None, project_dir: Path | str | None = None, *,
    user_dir: Path | str | None = None, sources: Iterable[str] | None = None,
    model_aliases: Mapping[str, str] | None = None,
) -> dict[str, LoadedProfile]:
    """The built-ins overlaid by the user's and then the project's profile and agent files.

    `user_dir` holds `~/.codex` and `~/.claude` (default: the user's home directory when a
    `home` is given; no `home`, no user layer). `sources` and `model_aliases` default to
    `home/config.toml`'s `[profiles] sources` and `[model_aliases]`. A peer's file that does
    not parse is skipped with one warning; our own TOML profiles stay strict.
    """
    home_path = None if home is None else Path(home)
    options = read_options(home_path, sources, model_aliases)
    if user_dir is None and home is not None:
        user_dir = _user_home()
    return load_layers(home_path, None if project_dir is None else Path(project_dir),
                       None if user_dir is None else Path(user_dir), options)


def _user_home() -> Path | None:
    try:
        return Path.home()
    except RuntimeError:  # no HOME and no passwd entry: no user folders
        return None


def read_options(home: Path | None, sources: Iterable[str] | None = None,
                 model_aliases: Mapping[str, str] | None = None) -> ProfileOptions:
    """The options of `home/config.toml` (defaults without one), `sources` and
    `model_aliases` given here winning. Our own file: every problem is a `ConfigError`."""
    table = _config(home) if home is not None else {}
    where = str(home / "config.toml") if home is not None else "load_profiles"
    chosen = sources if sources is not None else table.get("profiles", {}).get("sources")
    aliases = (model_aliases if model_aliases is not None
               else table.get("model_aliases", {}))
    return ProfileOptions(
        sources=_check_sources(where, chosen) if chosen is not None else SOURCE_WORDS,
        model_aliases=_check_aliases(where, aliases),
    )


def _config(home: Path) -> dict[str, Any]:
    """The `[profiles]` and `[model_aliases]` tables (settings.py reads the rest)."""
    path = home / "config.toml"
    try:
        text = read_regular(path, 1 << 20).decode("utf-8")
    except FileNotFoundError:
        return {}
    except NotReadable as exc:
        raise ConfigError(str(path), "-", str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), "-", f"cannot read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), "-", f"invalid TOML: {exc}") from None
    for key in ("profiles", "model_aliases"):
        if not isinstance(data.get(key, {}), dict):
            raise ConfigError(str(path), key, "must be a table")
    for key in data.get("profiles", {}):
        if key != "sources":
            raise ConfigError(str(path), f"profiles.{key}", "unknown key; allowed: sources")
    return {key: data[key] for key in ("profiles", "model_aliases") if key in data}


def _check_sources(where: str, value: object) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigError(where, "profiles.sources", "must be a list of strings")
    words = list(value)
    unknown = [w for w in words if w not in SOURCE_WORDS]
    if unknown:
        raise ConfigError(where, "profiles.sources",
                          f"unknown source {unknown[0]!r:.40}; known: {', '.join(SOURCE_WORDS)}")
    return frozenset(words)


def _check_aliases(where: str, value: Mapping[str, Any]) -> dict[str, str]:
    for alias, model in value.items():
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(where, f"model_aliases.{alias}", "must be a non-empty string")
    return {alias: model.strip() for alias, model in value.items()}


def load_layers(home: Path | None, project: Path | None, user: Path | None,
                options: ProfileOptions) -> dict[str, LoadedProfile]:
    """Every layer `options.sources` keeps, in order, later winning by name."""
    aliases = options.model_aliases
    layers: list[tuple[str, Callable[[], dict[str, LoadedProfile]]]] = [
        ("builtin", builtin_profiles)]
    if home is not None:
        layers.append(("subsessions", lambda: load_profile_dir(home / "profiles")))
    if user is not None:
        layers += _peer_layers(user, aliases, copilot=False)
    if project is not None:
        ours = project / ".subsessions"
        layers += [("subsessions", lambda: load_profile_dir(ours / "profiles")),
                   ("subsessions", lambda: load_seed_dir(ours / "agents", aliases))]
        layers += _peer_layers(project, aliases, copilot=True)
    found: dict[str, LoadedProfile] = {}
    for word, load in layers:
        if word in options.sources:
            found.update(load())
    return found


def _peer_layers(root: Path, aliases: Mapping[str, str], *, copilot: bool
                 ) -> list[tuple[str, Callable[[], dict[str, LoadedProfile]]]]:
    layers: list[tuple[str, Callable[[], dict[str, LoadedProfile]]]] = [
        ("codex", lambda: load_peer_dir(root / ".codex" / "agents", ".toml", codex_profile,
                                        aliases)),
        ("claude", lambda: load_peer_dir(root / ".claude" / "agents", ".md", claude_profile,
                                         aliases)),
    ]
    if copilot:  # Copilot's custom agents live in a repository only
        layers.append(("copilot", lambda: load_peer_dir(
            root / ".github" / "agents", ".agent.md", copilot_profile, aliases)))
    return layers


def load_peer_dir(folder: Path, suffix: str, parse: Parse,
                  aliases: Mapping[str, str]) -> dict[str, LoadedProfile]:
    """The folder's `*{suffix}` files that parse; each other one is one warning."""
    found: dict[str, LoadedProfile] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob(f"*{suffix}")):
        try:
            profile = parse(read_profile_file(path), str(path), path.name[: -len(suffix)],
                            aliases)
        except ProfileError as exc:
            warn_skipped(exc)
            continue
        found[profile.name] = LoadedProfile(profile, str(path))
    return found


def load_seed_dir(folder: Path, aliases: Mapping[str, str]) -> dict[str, LoadedProfile]:
    """Each agent folder under `folder` that loads; each other one is one warning."""
    found: dict[str, LoadedProfile] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.iterdir()):
        if not path.is_dir() and not path.is_symlink():
            continue  # a README beside the agents
        try:
            profile = seed_profile(path, aliases)
        except ProfileError as exc:
            warn_skipped(exc)
            continue
        found[profile.name] = LoadedProfile(profile, str(path / "AGENTS.md"))
    return found


def warn_skipped(error: ProfileError) -> None:
    """One line, naming the file and the reason (a YAML message spans several)."""
    reason = " ".join(error.problem.split())[:300]
    log.warning("subsessions: skipped agent file %s: %s", error.source, reason)
