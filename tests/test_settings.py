"""`config.toml`, command-line overrides, API key rules and the model client they build.

Bad configuration must fail with ONE line naming the file, the key and the problem;
a missing API key for a non-loopback URL must say which variable to set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, fake_openai, text

from subsessions import ConfigError, MissingApiKey
from subsessions.models.base import ModelRequest
from subsessions.models.factory import build_model_client
from subsessions.models.openai_chat import OpenAIChatModel
from subsessions.models.openai_responses import OpenAIResponsesModel
from subsessions.settings import (
    Provider,
    RaySettings,
    Settings,
    api_key,
    is_loopback,
    load_settings,
    with_overrides,
)

__all__ = ["fake_openai"]  # the fixture, imported so that pytest finds it here

UNSET = "SUBSESSIONS_TEST_UNSET_KEY"

CUSTOM = """
model = "qwen3:8b"
model_provider = "local"

[model_providers.local]
base_url = "http://127.0.0.1:9/v1"
env_key = "LOCAL_KEY"
wire_api = "chat"
request_max_retries = 7
stream_idle_timeout_ms = 1500

[agents]
max_depth = 3
max_children = 2
"""


def write_config(home: Path, content: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.toml"
    path.write_text(content, encoding="utf-8")
    return path


def choices(settings: Settings) -> tuple[object, ...]:
    """What the settings decide for a run (not where they came from)."""
    return (
        settings.model,
        settings.model_provider,
        settings.provider,
        settings.max_depth,
        settings.max_children,
    )


def one_line(exc: BaseException) -> str:
    message = str(exc)
    assert message, "an empty error message"
    assert "\n" not in message, message
    return message


# -- loading ------------------------------------------------------------------------------
def test_defaults_without_a_file(home: Path) -> None:
    settings = load_settings(home)  # home does not even exist

    assert choices(settings) == choices(Settings())
    assert settings.model_provider == "openai"
    provider = settings.provider
    assert provider.base_url == "https://api.openai.com/v1"
    assert provider.env_key == "OPENAI_API_KEY"
    assert provider.wire_api == "responses"
    assert provider.request_max_retries >= 1
    assert provider.stream_idle_timeout_ms > 0
    assert (settings.max_depth, settings.max_children) == (2, 8)


def test_an_empty_file_means_the_defaults(home: Path) -> None:
    write_config(home, "")
    assert choices(load_settings(home)) == choices(Settings())


def test_a_custom_provider(home: Path) -> None:
    write_config(home, CUSTOM)

    settings = load_settings(home)

    assert settings.model == "qwen3:8b"
    assert settings.model_provider == "local"
    assert settings.provider == Provider(
        name="local",
        base_url="http://127.0.0.1:9/v1",
        env_key="LOCAL_KEY",
        wire_api="chat",
        request_max_retries=7,
        stream_idle_timeout_ms=1500,
    )
    assert (settings.max_depth, settings.max_children) == (3, 2)
    assert "openai" in settings.providers  # the built-ins stay available


@pytest.mark.parametrize(
    ("name", "base_url"),
    [
        ("ollama", "http://localhost:11434/v1"),
        ("vllm", "http://localhost:8000/v1"),
        ("llamacpp", "http://localhost:8080/v1"),
    ],
)
def test_builtin_local_providers_speak_chat(home: Path, name: str, base_url: str) -> None:
    write_config(home, f'model_provider = "{name}"\n')

    provider = load_settings(home).provider

    assert provider.base_url == base_url
    assert provider.wire_api == "chat"


def test_a_table_for_a_builtin_provider_changes_only_what_it_names(home: Path) -> None:
    write_config(
        home,
        'model_provider = "ollama"\n[model_providers.ollama]\n'
        'base_url = "http://10.0.0.5:11434/v1"\n',
    )

    provider = load_settings(home).provider

    assert provider.base_url == "http://10.0.0.5:11434/v1"
    assert provider.wire_api == "chat"  # kept from the built-in
    assert provider.env_key == "OLLAMA_API_KEY"


# -- bad configuration: one line naming the file, the key and the problem --------------------
BAD_CONFIGS = [
    pytest.param('model = \n', "line 1", "invalid", id="toml-syntax"),
    pytest.param('model = "x"\n[agents\n', "line 2", "invalid", id="toml-table-syntax"),
    pytest.param('modle = "gpt-5.1"\n', "modle", "unknown key", id="unknown-top-key"),
    pytest.param("[agents]\nmax_kids = 3\n", "agents.max_kids", "unknown key", id="unknown-agent"),
    pytest.param(
        '[model_providers.local]\nbase_url = "http://127.0.0.1:1/v1"\nbaseurl = "x"\n',
        "model_providers.local.baseurl",
        "unknown key",
        id="unknown-provider-key",
    ),
    pytest.param("model = 5\n", "model", "string", id="wrong-type-string"),
    pytest.param('[agents]\nmax_depth = "3"\n', "agents.max_depth", "integer", id="wrong-type-int"),
    pytest.param("[agents]\nmax_depth = true\n", "agents.max_depth", "integer", id="bool-for-int"),
    pytest.param(
        "[model_providers.openai]\nstream_idle_timeout_ms = 1.5\n",
        "model_providers.openai.stream_idle_timeout_ms",
        "integer",
        id="float-for-int",
    ),
    pytest.param("[agents]\nmax_children = -1\n", "agents.max_children", "negative", id="negative"),
    pytest.param(
        "[model_providers.openai]\nrequest_max_retries = -2\n",
        "model_providers.openai.request_max_retries",
        "negative",
        id="negative-retries",
    ),
    pytest.param(
        '[model_providers.openai]\nwire_api = "grpc"\n',
        "model_providers.openai.wire_api",
        "grpc",
        id="bad-wire-api",
    ),
    pytest.param(
        '[model_providers.local]\nbase_url = "localhost:8000/v1"\n',
        "model_providers.local.base_url",
        "URL",
        id="url-without-scheme",
    ),
    pytest.param(
        '[model_providers.local]\nbase_url = "ftp://example.com/v1"\n',
        "model_providers.local.base_url",
        "URL",
        id="url-not-http",
    ),
    pytest.param('model_provider = "nope"\n', "model_provider", "nope", id="unknown-provider"),
    pytest.param(
        '[model_providers.local]\nwire_api = "chat"\n',
        "model_providers.local.base_url",
        "required",
        id="new-provider-without-base-url",
    ),
    pytest.param("agents = 3\n", "agents", "table", id="agents-not-a-table"),
    pytest.param("ray = 3\n", "ray", "table", id="ray-not-a-table"),
    pytest.param("[ray]\nnodes = 2\n", "ray.nodes", "unknown key", id="ray-unknown-key"),
    pytest.param("[ray]\nshards = 0\n", "ray.shards", "at least 1", id="ray-no-shards"),
    pytest.param("[ray]\nper_shard = -1\n", "ray.per_shard", "negative", id="ray-negative"),
    pytest.param("[ray]\naddress = 7\n", "ray.address", "string", id="ray-address-number"),
    pytest.param("model_providers = {local = 3}\n", "model_providers.local", "table",
                 id="provider-not-a-table"),
]


@pytest.mark.parametrize(("content", "key", "problem"), BAD_CONFIGS)
def test_bad_config_is_one_line_naming_file_key_and_problem(
    home: Path, content: str, key: str, problem: str
) -> None:
    path = write_config(home, content)

    with pytest.raises(ConfigError) as raised:
        load_settings(home)

    message = one_line(raised.value)
    assert str(path) in message
    assert key in message
    assert problem in message


def test_a_config_that_is_not_utf8_is_one_line(home: Path) -> None:
    home.mkdir(parents=True)
    path = home / "config.toml"
    path.write_bytes(b'model = "\xff\xfe"\n')

    with pytest.raises(ConfigError) as raised:
        load_settings(home)

    assert str(path) in one_line(raised.value)


def test_the_key_named_is_the_key_whose_problem_is_reported(home: Path) -> None:
    write_config(home, '[model_providers.local]\nbase_url = "nope"\nwire_api = "grpc"\n')

    with pytest.raises(ConfigError) as raised:
        load_settings(home)

    message = one_line(raised.value)
    if "URL" in message:
        assert "model_providers.local.base_url" in message, message
    else:
        assert "model_providers.local.wire_api" in message, message


# -- flags over the file ------------------------------------------------------------------------
def test_flags_override_the_file(home: Path) -> None:
    write_config(home, CUSTOM)

    settings = with_overrides(
        load_settings(home),
        model="llama3.1",
        base_url="http://127.0.0.1:8123/v1",
        wire_api="responses",
        api_key_env="OTHER_KEY",
        max_depth=5,
        max_children=1,
    )

    assert settings.model == "llama3.1"
    assert settings.model_provider == "local"
    provider = settings.provider
    assert provider.base_url == "http://127.0.0.1:8123/v1"
    assert provider.wire_api == "responses"
    assert provider.env_key == "OTHER_KEY"
    assert provider.request_max_retries == 7  # not a flag: from the file
    assert (settings.max_depth, settings.max_children) == (5, 1)


def test_absent_flags_keep_the_file(home: Path) -> None:
    write_config(home, CUSTOM)
    settings = load_settings(home)

    same = with_overrides(
        settings,
        model=None,
        base_url=None,
        wire_api=None,
        api_key_env=None,
        max_depth=None,
        max_children=None,
    )

    assert same == settings


def test_a_zero_limit_flag_is_kept(home: Path) -> None:
    settings = with_overrides(load_settings(home), max_depth=0, max_children=0)
    assert (settings.max_depth, settings.max_children) == (0, 0)


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        ({"base_url": "localhost:1234"}, "--base-url"),
        ({"base_url": "file:///tmp/x"}, "--base-url"),
        ({"wire_api": "grpc"}, "--wire-api"),
    ],
)
def test_a_bad_flag_is_one_line_naming_the_flag(
    home: Path, flags: dict[str, str], flag: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        with_overrides(load_settings(home), **flags)

    message = one_line(raised.value)
    assert flag in message
    assert next(iter(flags.values())) in message


# -- API keys -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        "https://api.openai.com/v1",
        "http://10.0.0.5:8000/v1",
        "http://localhost.example.com/v1",
        "http://0.0.0.0:8000/v1",
    ],
)
def test_missing_key_for_a_remote_url_says_which_variable_to_set(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.delenv(UNSET, raising=False)
    provider = Provider(name="remote", base_url=url, env_key=UNSET)

    with pytest.raises(MissingApiKey) as raised:
        api_key(provider)

    message = one_line(raised.value)
    assert f"set {UNSET}" in message
    assert isinstance(raised.value, ConfigError)
    assert not is_loopback(url)


def test_an_empty_key_counts_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UNSET, "")
    with pytest.raises(MissingApiKey):
        api_key(Provider(name="remote", base_url="https://api.example.com/v1", env_key=UNSET))


def test_the_key_comes_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UNSET, "sk-test-123")
    provider = Provider(name="remote", base_url="https://api.example.com/v1", env_key=UNSET)
    assert api_key(provider) == "sk-test-123"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/v1",
        "http://localhost:11434/v1",
        "http://[::1]:8080/v1",
        "http://127.0.0.2/v1",
        "http://LOCALHOST:1234/v1",
    ],
)
def test_a_loopback_url_needs_no_key(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.delenv(UNSET, raising=False)
    provider = Provider(name="local", base_url=url, env_key=UNSET)

    key = api_key(provider)

    assert isinstance(key, str)
    assert key  # the SDK refuses an empty key
    assert is_loopback(url)


def test_build_fails_at_start_without_a_key(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(UNSET, raising=False)
    settings = with_overrides(
        load_settings(home), base_url="https://api.example.com/v1", api_key_env=UNSET
    )

    with pytest.raises(MissingApiKey) as raised:
        build_model_client(settings)

    assert UNSET in one_line(raised.value)


# -- the client the settings build ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("wire_api", "kind"), [("chat", OpenAIChatModel), ("responses", OpenAIResponsesModel)]
)
async def test_build_model_client_follows_the_provider(
    home: Path, monkeypatch: pytest.MonkeyPatch, wire_api: str, kind: type
) -> None:
    monkeypatch.setenv("LOCAL_KEY", "sk-local")
    write_config(home, CUSTOM.replace('wire_api = "chat"', f'wire_api = "{wire_api}"'))

    routes = build_model_client(load_settings(home))
    client = routes.default  # the configured provider's; others are built when named
    try:
        assert routes.provider == "local"
        assert isinstance(client, kind)
        assert str(client.client.base_url).rstrip("/") == "http://127.0.0.1:9/v1"
        assert client.client.api_key == "sk-local"
        assert client.client.max_retries == 0  # one retry policy, ours
        assert client.retry.max_retries == 7
        assert client.stream_idle_timeout == pytest.approx(1.5)
        assert client.provider == "local"
    finally:
        await routes.aclose()


@pytest.mark.parametrize("wire_api", ["chat", "responses"])
async def test_a_configured_provider_answers(
    home: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, wire_api: str
) -> None:
    monkeypatch.delenv(UNSET, raising=False)
    write_config(
        home,
        f'model = "local-model"\nmodel_provider = "fake"\nmodel_max_output_tokens = 7\n'
        f'[model_providers.fake]\nbase_url = "{fake_openai.base_url}"\n'
        f'wire_api = "{wire_api}"\nenv_key = "{UNSET}"\n',
    )
    fake_openai.reply_with(text("configured"))
    settings = load_settings(home)

    client = build_model_client(settings)
    try:
        user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
        response = await client.respond(
            ModelRequest(session_id="s", model=settings.model, instructions="", items=(user,))
        )
    finally:
        await client.aclose()

    assert response.output[0]["content"][0]["text"] == "configured"
    [request] = fake_openai.requests
    assert request.api == wire_api
    assert request.body["model"] == "local-model"
    assert request.headers["authorization"].startswith("Bearer ")
    # each call's output cap, under the name each wire API reads
    assert request.body["max_output_tokens" if wire_api == "responses" else "max_tokens"] == 7



@pytest.mark.parametrize("plant", ["fifo", "zero", "link"])
def test_a_planted_config_file_is_one_clear_line(tmp_path: Path, plant: str) -> None:
    """A home's config.toml that is a FIFO, a link to /dev/zero or any symlink is refused at
    once (no hang, no exhausted memory), as profiles are."""
    home = tmp_path / "home"
    home.mkdir()
    path = home / "config.toml"
    if plant == "fifo":
        os.mkfifo(path)
    elif plant == "zero":
        path.symlink_to("/dev/zero")
    else:
        (tmp_path / "real.toml").write_text('model = "m"\n')
        path.symlink_to(tmp_path / "real.toml")
    with pytest.raises(ConfigError, match=r"cannot read: (not a regular file|a symbolic link)"):
        load_settings(home)


def test_a_ray_table_and_the_ray_flag(home: Path) -> None:
    assert load_settings(home).ray is None  # in process unless asked
    write_config(home, '[ray]\naddress = "ray://head:10001"\nshards = 4\nper_shard = 50\n')
    settings = load_settings(home)
    assert settings.ray == RaySettings(address="ray://head:10001", shards=4, per_shard=50)
    flagged = with_overrides(settings, ray="auto")
    assert flagged.ray == RaySettings(address="auto", shards=4, per_shard=50)
    assert with_overrides(Settings(), ray="local").ray == RaySettings(address=None)
    with pytest.raises(ConfigError, match="--ray: must be 'local', 'auto' or an address"):
        with_overrides(Settings(), ray=" ")
