"""`$SUBSESSIONS_HOME/config.toml`, overridden by command-line flags (no model imports: the
client it describes is built by `models.factory`). Every problem is one line naming the file,
the key and what is wrong."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import evolve, field, frozen

from subsessions._util.safe_read import NotReadable, read_regular
from subsessions._util.urls import is_loopback, url_problem
from subsessions.environment import EnvPolicy, env_policy_from_table
from subsessions.errors import ConfigError, MissingApiKey

WIRE_APIS = ("responses", "chat", "anthropic", "echo")
CLAUDE_MODEL = "claude-sonnet-4-5"
"""The model of `--wire-api anthropic` when neither config.toml nor `--model` names one."""


@frozen
class Provider:
    name: str
    base_url: str
    env_key: str = "OPENAI_API_KEY"
    wire_api: str = "responses"
    request_max_retries: int = 4
    stream_idle_timeout_ms: int = 300_000
    prompt_cache: bool = True  # the anthropic wire's cache_control breakpoints
    stream: bool = True  # false: the anthropic wire asks for whole messages
    thinking_budget_tokens: int = 0  # the anthropic wire's extended thinking; 0: off


BUILTIN_PROVIDERS = {
    "openai": Provider("openai", "https://api.openai.com/v1"),
    "ollama": Provider("ollama", "http://localhost:11434/v1", env_key="OLLAMA_API_KEY",
                       wire_api="chat"),
    "vllm": Provider("vllm", "http://localhost:8000/v1", env_key="VLLM_API_KEY",
                     wire_api="chat"),
    "llamacpp": Provider("llamacpp", "http://localhost:8080/v1", env_key="LLAMACPP_API_KEY",
                         wire_api="chat"),
    "anthropic": Provider("anthropic", "https://api.anthropic.com",
                          env_key="ANTHROPIC_API_KEY", wire_api="anthropic"),
    # offline: answers every task with its prompt, no key and no server (`models.scripted`)
    "echo": Provider("echo", "http://127.0.0.1/echo", env_key="SUBSESSIONS_ECHO_KEY",
                     wire_api="echo"),
}


@frozen
class CommandHook:
    """One `[[hooks.EVENT]]` entry: a command run with the event as JSON on stdin."""

    event: str  # SubagentStart | SubagentStop (Claude Code's names)
    command: str
    timeout: float = 30.0


HOOK_EVENTS = ("SubagentStart", "SubagentStop")


@frozen
class RaySettings:
    """The `[ray]` table (or `--ray ADDRESS`): children of top-level sessions run on a Ray
    cluster. No `address` starts a local Ray; "auto" joins the one on this machine."""

    address: str | None = None
    shards: int | None = None
    per_shard: int = 1000


@frozen
class Settings:
    model: str = "gpt-5.1"
    model_provider: str = "openai"
    # each model call's output cap (Chat's max_tokens, Responses' max_output_tokens); None: none
    model_max_output_tokens: int | None = None
    providers: Mapping[str, Provider] = BUILTIN_PROVIDERS
    max_depth: int = 2
    max_children: int = 8
    max_queued: int = 256  # spawns beyond max_children that wait (0: refused)
    mcp_servers: Mapping[str, Any] = {}  # [mcp_servers.NAME] tables, checked by subsessions.mcp
    env_policy: EnvPolicy = field(factory=EnvPolicy)  # [shell_environment_policy]
    ray: RaySettings | None = None  # [ray]: None runs every child in this process
    command_hooks: tuple[CommandHook, ...] = ()  # [[hooks.SubagentStart]] and the like
    source: str = "defaults"  # the file these came from, for error messages
    named: frozenset[str] = frozenset()  # the top-level keys the file set (model, ...)

    @property
    def provider(self) -> Provider:
        return self.providers[self.model_provider]


_TOP_KEYS = {"model": str, "model_provider": str, "model_max_output_tokens": int}
_PROVIDER_KEYS: dict[str, type] = {
    "name": str, "base_url": str, "env_key": str, "wire_api": str,
    "request_max_retries": int, "stream_idle_timeout_ms": int, "prompt_cache": bool,
    "stream": bool, "thinking_budget_tokens": int,
}
_AGENT_KEYS = {"max_depth": int, "max_children": int, "max_queued": int}
_TABLES = {"model_providers", "agents", "mcp_servers", "shell_environment_policy", "ray",
           "hooks",
           # read, with their own checks, where profiles load (subsessions.profiles.layers)
           "profiles", "model_aliases"}
_RAY_KEYS: dict[str, type] = {"address": str, "shards": int, "per_shard": int}


def _check(source: str, key: str, value: Any, wanted: type) -> Any:
    if wanted is bool:
        if not isinstance(value, bool):
            raise ConfigError(source, key, "must be true or false")
        return value
    if isinstance(value, bool) or not isinstance(value, wanted):
        raise ConfigError(source, key, f"must be {'an integer' if wanted is int else 'a string'}")
    if isinstance(value, int) and value < 0:
        raise ConfigError(source, key, "must not be negative")
    return value


def default_home() -> Path:
    """`$SUBSESSIONS_HOME`, else `~/.subsessions`."""
    configured = os.environ.get("SUBSESSIONS_HOME")
    return Path(configured) if configured else Path.home() / ".subsessions"


def load_settings(home: Path) -> Settings:
    """The settings in `home/config.toml`, or the defaults when there is no such file."""
    path = home / "config.toml"
    source = str(path)
    try:  # a regular file only, never through a link, at most 1 MiB (the home may be shared)
        text = read_regular(path, 1 << 20).decode("utf-8")
    except FileNotFoundError:
        return Settings()
    except NotReadable as exc:
        raise ConfigError(source, "-", str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, "-", f"cannot read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, "-", f"invalid TOML: {exc}") from None
    return settings_from_mapping(data, source)


def settings_from_mapping(data: Mapping[str, Any], source: str) -> Settings:
    values: dict[str, Any] = {}
    providers = dict(BUILTIN_PROVIDERS)
    for key, value in data.items():
        if key in _TOP_KEYS:
            values[key] = _check(source, key, value, _TOP_KEYS[key])
            if key == "model_max_output_tokens" and value < 1:
                raise ConfigError(source, key, "must be at least 1")
        elif key not in _TABLES:
            raise ConfigError(source, key, "unknown key")
        elif not isinstance(value, dict):
            raise ConfigError(source, key, "must be a table")
    for name, table in data.get("model_providers", {}).items():
        providers[name] = _provider(source, name, table, providers.get(name))
    for key, value in data.get("agents", {}).items():
        if key not in _AGENT_KEYS:
            raise ConfigError(source, f"agents.{key}", "unknown key")
        values[key] = _check(source, f"agents.{key}", value, int)
    servers = data.get("mcp_servers", {})
    if "shell_environment_policy" in data:
        values["env_policy"] = env_policy_from_table(data["shell_environment_policy"], source)
    if "ray" in data:
        values["ray"] = _ray(source, data["ray"])
    if "hooks" in data:
        values["command_hooks"] = _hooks(source, data["hooks"])
    named = frozenset(k for k in data if k in _TOP_KEYS)
    settings = Settings(providers=providers, mcp_servers=servers, source=source, named=named,
                        **values)
    if settings.model_provider not in providers:
        raise ConfigError(
            source, "model_provider",
            f"no provider {settings.model_provider!r}; known: {', '.join(sorted(providers))}",
        )
    return settings


def _hooks(source: str, table: dict[str, Any]) -> tuple[CommandHook, ...]:
    """`[[hooks.SubagentStart]]` / `[[hooks.SubagentStop]]`: `command`, and `timeout`
    (seconds, default 30)."""
    found: list[CommandHook] = []
    for event, entries in table.items():
        where = f"hooks.{event}"
        if event not in HOOK_EVENTS:
            raise ConfigError(source, where, f"unknown event; known: {', '.join(HOOK_EVENTS)}")
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ConfigError(source, where, f"must be an array of tables ([[{where}]])")
        for entry in entries:
            unknown = sorted(set(entry) - {"command", "timeout"})
            if unknown:
                raise ConfigError(source, f"{where}.{unknown[0]}", "unknown key")
            command, timeout = entry.get("command"), entry.get("timeout", 30)
            if not isinstance(command, str) or not command.strip():
                raise ConfigError(source, f"{where}.command", "must be a non-empty string")
            if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (
                    0 < timeout <= 600):
                raise ConfigError(source, f"{where}.timeout", "must be seconds, more than 0 "
                                  "and at most 600")
            found.append(CommandHook(event, command, float(timeout)))
    return tuple(found)


def _ray(source: str, table: dict[str, Any]) -> RaySettings:
    fields: dict[str, Any] = {}
    for key, value in table.items():
        if key not in _RAY_KEYS:
            raise ConfigError(source, f"ray.{key}", "unknown key")
        fields[key] = _check(source, f"ray.{key}", value, _RAY_KEYS[key])
        if key != "address" and value < 1:
            raise ConfigError(source, f"ray.{key}", "must be at least 1")
    return RaySettings(**fields)


def _provider(source: str, name: str, table: Any, base: Provider | None) -> Provider:
    where = f"model_providers.{name}"
    if not isinstance(table, dict):
        raise ConfigError(source, where, "must be a table")
    fields: dict[str, Any] = {}
    for key, value in table.items():
        if key not in _PROVIDER_KEYS:
            raise ConfigError(source, f"{where}.{key}", "unknown key")
        fields[key] = _check(source, f"{where}.{key}", value, _PROVIDER_KEYS[key])
    fields.pop("name", None)
    if base is None and "base_url" not in fields:
        raise ConfigError(source, f"{where}.base_url", "is required for a new provider")
    provider = evolve(base, **fields) if base else Provider(name=name, **fields)
    for key, problem in (("base_url", url_problem(provider.base_url)),
                         ("wire_api", wire_problem(provider.wire_api))):
        if problem:
            raise ConfigError(source, f"{where}.{key}", problem)
    return provider


def wire_problem(wire_api: str) -> str | None:
    return None if wire_api in WIRE_APIS else (
        f"{wire_api!r} is not one of: {', '.join(WIRE_APIS)}")


def with_overrides(settings: Settings, **flags: Any) -> Settings:
    """Command-line flags over the file: model, base_url, wire_api, api_key_env, limits.

    `--wire-api anthropic` with no provider named in the file selects the built-in
    `anthropic` provider (and, with no model named either, a Claude model).
    `--model-provider NAME` picks a provider of the file's or a built-in (`echo`: offline)."""
    name = flags.get("model_provider")
    if name is not None:
        if name not in settings.providers:
            raise ConfigError("command line", "--model-provider",
                              f"{name!r} is not a provider here; have: "
                              f"{', '.join(sorted(settings.providers))}")
        settings = evolve(settings, model_provider=name,
                          named=settings.named | {"model_provider"})
    settings = _claude_if_asked(settings, flags.get("wire_api"))
    provider = settings.provider
    changes = {k: flags[k] for k in ("base_url", "wire_api") if flags.get(k) is not None}
    if flags.get("api_key_env"):
        changes["env_key"] = flags["api_key_env"]
    for flag, problem in (("base_url", url_problem), ("wire_api", wire_problem)):
        if flag in changes and (text := problem(changes[flag])):
            raise ConfigError("command line", f"--{flag.replace('_', '-')}", text)
    providers = dict(settings.providers)
    providers[provider.name] = evolve(provider, **changes)
    top = {k: flags[k] for k in ("model", "max_depth", "max_children") if flags.get(k) is not None}
    address = flags.get("ray")
    if address is not None:  # --ray local: a Ray started here; else the cluster's address
        if not address.strip():
            raise ConfigError("command line", "--ray", "must be 'local', 'auto' or an address")
        top["ray"] = evolve(settings.ray or RaySettings(),
                            address=None if address == "local" else address)
    return evolve(settings, providers=providers, **top)


def _claude_if_asked(settings: Settings, wire_api: Any) -> Settings:
    if (wire_api != "anthropic" or "model_provider" in settings.named
            or settings.provider.wire_api == "anthropic"
            or "anthropic" not in settings.providers):
        return settings
    model = settings.model if "model" in settings.named else CLAUDE_MODEL
    return evolve(settings, model_provider="anthropic", model=model)


def api_key(provider: Provider) -> str:
    key = os.environ.get(provider.env_key)
    if key:
        return key
    if is_loopback(provider.base_url):
        return "not-needed"  # local servers (Ollama, vLLM, llama.cpp) take any key
    raise MissingApiKey(provider.env_key, provider.name, provider.base_url)
