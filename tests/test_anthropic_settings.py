"""Choosing the `anthropic` wire (DESIGN 3.14): `--wire-api anthropic` and the built-in
provider, `prompt_cache` and `stream` in a provider's table, the `[anthropic]` extra imported
only when used (and one line without it), the command line end to end against the loopback
Messages fake, and `PROVIDER:MODEL` routing between providers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

anthropic = pytest.importorskip("anthropic", reason="pip install 'subsessions[anthropic]'")

from fake_anthropic import Failure, FakeAnthropic, Turn  # noqa: E402
from openai_support import REPO, UNSET, run  # noqa: E402

from subsessions.errors import ConfigError, ModelError  # noqa: E402
from subsessions.models.anthropic_wire import AnthropicModel  # noqa: E402
from subsessions.models.base import ModelRequest  # noqa: E402
from subsessions.models.factory import build_model_client, build_provider_client  # noqa: E402
from subsessions.settings import (  # noqa: E402
    CLAUDE_MODEL,
    Settings,
    settings_from_mapping,
    with_overrides,
)


def test_the_wire_flag_alone_selects_the_built_in_provider_and_a_claude_model() -> None:
    settings = with_overrides(Settings(), wire_api="anthropic")
    provider = settings.provider
    assert (provider.name, provider.base_url, provider.env_key, provider.wire_api) == (
        "anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY", "anthropic")
    assert settings.model == CLAUDE_MODEL and provider.prompt_cache and provider.stream
    moved = with_overrides(Settings(), wire_api="anthropic", base_url="http://127.0.0.1:5",
                           model="claude-opus-4-1")
    assert (moved.model_provider, moved.provider.base_url, moved.model) == (
        "anthropic", "http://127.0.0.1:5", "claude-opus-4-1")


def test_a_named_provider_or_model_is_kept() -> None:
    named = settings_from_mapping({"model_provider": "ollama", "model": "qwen3"}, "c.toml")
    kept = with_overrides(named, wire_api="anthropic")
    assert (kept.model_provider, kept.provider.wire_api, kept.model) == (
        "ollama", "anthropic", "qwen3")  # an Anthropic-compatible endpoint of that provider
    only_model = with_overrides(settings_from_mapping({"model": "claude-x"}, "c.toml"),
                                wire_api="anthropic")
    assert (only_model.model_provider, only_model.model) == ("anthropic", "claude-x")


def test_prompt_cache_and_stream_are_read_from_the_providers_table() -> None:
    settings = settings_from_mapping(
        {"model_provider": "anthropic", "model_providers": {
            "anthropic": {"prompt_cache": False, "stream": False, "base_url": "http://127.0.0.1:9"}}},
        "c.toml")
    client = build_provider_client(settings, settings.provider)
    assert isinstance(client, AnthropicModel)
    assert (client.prompt_cache, client.stream) == (False, False)
    assert client.client.max_retries == 0  # one retry policy, ours
    assert str(client.client.base_url).rstrip("/") == "http://127.0.0.1:9"


@pytest.mark.parametrize(("table", "problem"), [
    ({"prompt_cache": "no"}, "model_providers.anthropic.prompt_cache: must be true or false"),
    ({"stream": 1}, "model_providers.anthropic.stream: must be true or false"),
    ({"wire_api": "messages"}, "'messages' is not one of: responses, chat, anthropic"),
])
def test_bad_values_are_one_line(table: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        settings_from_mapping({"model_providers": {"anthropic": table}}, "c.toml")
    assert problem in str(raised.value) and "\n" not in str(raised.value)


async def test_a_model_naming_another_provider_is_routed_there_and_a_missing_key_fails_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(UNSET, raising=False)
    settings = settings_from_mapping({
        "model_provider": "anthropic", "model": "claude-test",
        "model_providers": {"anthropic": {"base_url": "http://127.0.0.1:9"},
                            "remote": {"base_url": "https://api.example.com/v1",
                                       "env_key": UNSET}}}, "c.toml")
    routes = build_model_client(settings)
    try:
        assert routes.route("claude-test") == (routes.default, "claude-test")
        assert routes.route("qwen3:8b") == (routes.default, "qwen3:8b")  # no provider qwen3
        assert routes.route("anthropic:claude-x") == (routes.default, "claude-x")
        request = ModelRequest(session_id="s", model="remote:gpt-x", instructions="", items=())
        with pytest.raises(ModelError, match=f"model remote:gpt-x: set {UNSET} to your API key"):
            await routes.respond(request)
    finally:
        await routes.aclose()


# -- the command line ---------------------------------------------------------------------------
async def test_run_on_the_anthropic_wire(home: Path, tmp_path: Path) -> None:
    async with FakeAnthropic(lambda request: Turn(text="hello from claude")) as fake:
        code, out, err = await run("run", "hi", "--home", str(home), "--wire-api", "anthropic",
                                   "--base-url", fake.base_url, cwd=tmp_path)
    assert (code, out, err) == (0, "hello from claude\n", "")
    [request] = fake.requests
    assert request.body["model"] == CLAUDE_MODEL and request.body["max_tokens"] == 8192
    assert request.api_key  # a loopback server needs no key: any is sent


@pytest.mark.parametrize(("status", "kind", "message"), [
    (401, "authentication_error", "invalid x-api-key"),
    (400, "invalid_request_error", "max_tokens: 8192 > 4096, the maximum for this model")])
async def test_an_api_error_is_one_line_on_stderr(home: Path, tmp_path: Path, status: int,
                                                  kind: str, message: str) -> None:
    async with FakeAnthropic(lambda request: Failure(status, kind, message)) as fake:
        url = fake.base_url
        code, out, err = await run("run", "hi", "--home", str(home), "--wire-api", "anthropic",
                                   "--base-url", url, cwd=tmp_path)
    assert code != 0 and out == ""
    assert err == f"subsessions: anthropic at {url} returned HTTP {status} {kind}: {message}\n"
    assert len(fake.requests) == 1  # not retried


def test_the_sdk_is_imported_only_when_the_wire_is_used() -> None:
    code = ("import sys, subsessions, subsessions.cli, subsessions.engine\n"
            "from subsessions.models.factory import build_model_client\n"
            "from subsessions.settings import Settings, with_overrides\n"
            "s = with_overrides(Settings(), base_url='http://127.0.0.1:9/v1')\n"
            "build_model_client(s)\n"
            "print('anthropic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin"})
    assert out.stdout.strip() == "False"


def test_the_wire_without_the_extra_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['anthropic'] = None\n")
    out = subprocess.run(
        [sys.executable, "-m", "subsessions", "run", "hi", "--wire-api", "anthropic",
         "--base-url", "http://127.0.0.1:9"], stdin=subprocess.DEVNULL, capture_output=True,
        text=True, cwd=tmp_path, timeout=60,
        env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin",
             "SUBSESSIONS_HOME": str(tmp_path / "home")})
    assert out.returncode != 0
    assert out.stderr == ("subsessions: provider anthropic: wire_api: the anthropic wire needs "
                          "the anthropic SDK: pip install 'subsessions[anthropic]'\n")


def test_thinking_is_read_from_the_table_and_must_fit_under_max_tokens() -> None:
    table = {"base_url": "http://127.0.0.1:9", "thinking_budget_tokens": 4096}
    settings = settings_from_mapping(
        {"model_provider": "anthropic", "model_providers": {"anthropic": table}}, "c.toml")
    client = build_provider_client(settings, settings.provider)
    assert isinstance(client, AnthropicModel) and client.thinking_budget_tokens == 4096
    capped = settings_from_mapping(
        {"model_provider": "anthropic", "model_max_output_tokens": 4096,
         "model_providers": {"anthropic": table}}, "c.toml")
    with pytest.raises(ConfigError) as raised:
        build_provider_client(capped, capped.provider)
    assert str(raised.value) == ("provider anthropic: thinking_budget_tokens: must be below "
                                 "max_tokens (4096; model_max_output_tokens sets it)")
