"""The real Codex CLI (`@openai/codex` 0.169.0 from npm), run offline, for the judge tests.

`codex_binary()` installs the package with npm into a cache directory once (reused after;
`SUBSESSIONS_CODEX_CACHE` moves it) and returns the native binary; the test is skipped only
when npm is absent or the install fails (offline). `offline_home()` writes a CODEX_HOME
config whose every network setting is loopback or off (docs/codex-rollouts.md §2), with a
provider table per provider name our rollouts use. `AppServer` speaks the newline-delimited
JSON-RPC of `codex app-server` over stdio; `migrate_dry_run` and `exec_resume` run the two
commands. Always point these at a copy of a home: Codex writes SQLite state into it and
`exec resume` appends to the rollout it resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
from npm_cache import cache_root, installed

VERSION = "0.169.0"
PACKAGE = f"@openai/codex@{VERSION}"
CACHE_ENV = "SUBSESSIONS_CODEX_CACHE"
TIMEOUT = 30.0
Json = dict[str, Any]


# -- the binary ------------------------------------------------------------------------------
def cache_dir() -> Path:
    named = os.environ.get(CACHE_ENV)
    return Path(named) if named else cache_root() / "codex"


def _installed(prefix: Path) -> Path | None:
    """The native binary of an install under `prefix` if it is the pinned version."""
    for found in sorted(prefix.glob("node_modules/@openai/codex-*/vendor/*/bin/codex")):
        try:
            out = subprocess.run([found, "--version"], capture_output=True, text=True,
                                 timeout=TIMEOUT, check=False).stdout
        except OSError:
            continue
        if out.split() == ["codex-cli", VERSION]:
            return found
    return None


def codex_binary() -> Path:
    """The pinned Codex binary, installed with npm into the cache on first use."""
    return installed(PACKAGE, cache_dir(), _installed)


# -- an offline home -------------------------------------------------------------------------
def offline_home(home: Path, base_url: str, providers: set[str], default: str) -> None:
    """Write `home/config.toml`: every provider at `base_url` (loopback), nothing else dials.

    `features.plugins = false` is what keeps Codex from resolving github.com and chatgpt.com
    (strace-verified); the other switches are belt and braces. "openai" is built in and
    cannot be redefined, so its base URL is set through `openai_base_url`.
    """
    assert base_url.startswith("http://127.0.0.1:"), base_url
    lines = [
        f'model_provider = "{default}"',
        'approval_policy = "never"',
        'sandbox_mode = "read-only"',
        "check_for_update_on_startup = false",
        f'openai_base_url = "{base_url}"',
    ]
    for name in sorted(providers - {"openai"}):
        lines += ["", f'[model_providers."{name}"]', f'name = "{name}"',
                  f'base_url = "{base_url}"', 'wire_api = "responses"']
    lines += ["", "[analytics]", "enabled = false", "", "[feedback]", "enabled = false", "",
              "[features]"]
    lines += [f"{flag} = false" for flag in ("plugins", "remote_plugin", "apps",
                                              "plugin_sharing", "in_app_updates", "tool_suggest")]
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def codex_env(home: Path) -> dict[str, str]:
    """The environment Codex runs in: this home only, no proxy, a dummy key for "openai"."""
    env = {k: v for k, v in os.environ.items()
           if k.upper() not in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
           and not k.startswith(("CODEX_", "OPENAI_"))}
    env.update(CODEX_HOME=str(home), NO_PROXY="127.0.0.1,localhost,::1", RUST_BACKTRACE="0",
               OPENAI_API_KEY="loopback-only")  # the built-in provider wants one; only
    return env  # the loopback server ever sees it


# -- codex app-server ------------------------------------------------------------------------
class AppServerError(Exception):
    def __init__(self, method: str, error: Json) -> None:
        super().__init__(f"{method}: {error.get('code')} {error.get('message')}")
        self.error = error


class AppServer:
    """A client of `codex app-server` over stdio: requests, and the notifications seen."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._next = 0
        self._pending: dict[int, asyncio.Future[Json]] = {}
        self.notifications: list[Json] = []
        self._notified = asyncio.Event()
        self._reader = asyncio.create_task(self._read(), name="codex-app-server-reader")

    async def _read(self) -> None:
        assert self._proc.stdout is not None
        while line := await self._proc.stdout.readline():
            message = orjson.loads(line)
            waiter = self._pending.pop(message.get("id", -1), None)
            if waiter is not None and "method" not in message:
                if not waiter.done():
                    waiter.set_result(message)
            elif "method" in message:
                self.notifications.append(message)
                self._notified.set()
        for waiter in self._pending.values():
            if not waiter.done():
                waiter.set_exception(EOFError("codex app-server closed its stdout"))

    async def request(self, method: str, params: Json | None = None) -> Json:
        self._next += 1
        waiter: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        self._pending[self._next] = waiter
        await self._send({"id": self._next, "method": method, "params": params or {}})
        reply = await asyncio.wait_for(waiter, TIMEOUT)
        if "error" in reply:
            raise AppServerError(method, reply["error"])
        result: Json = reply["result"]
        return result

    async def notify(self, method: str) -> None:
        await self._send({"method": method})

    async def notification(self, method: str, thread_id: str, timeout: float = 5.0) -> Json:
        """The first `method` notification about `thread_id` (waits for it to arrive)."""
        async with asyncio.timeout(timeout):
            while True:
                for note in self.notifications:
                    if note["method"] == method and note["params"].get("threadId") == thread_id:
                        params: Json = note["params"]
                        return params
                self._notified.clear()
                await self._notified.wait()

    async def _send(self, message: Json) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(orjson.dumps(message) + b"\n")
        await self._proc.stdin.drain()

    async def list_all(self, **params: Any) -> list[Json]:
        """Every page of `thread/list`."""
        threads: list[Json] = []
        cursor = None
        while True:
            page = await self.request("thread/list", {**params, "cursor": cursor, "limit": 50})
            threads += page["data"]
            cursor = page.get("nextCursor")
            if not cursor:
                return threads

    async def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            await asyncio.wait_for(self._proc.wait(), 5)
        except TimeoutError:
            self._proc.kill()
            await self._proc.wait()
        await self._reader


@contextlib.asynccontextmanager
async def app_server(
    binary: Path, home: Path, log: Path, provider: str | None = None
) -> AsyncIterator[AppServer]:
    """`codex app-server` on `home`, initialized; its stderr goes to `log`.

    `provider` selects a model provider: `thread/resume` restores a thread's model only when
    its provider is the selected one (naming it in the request resets the model).
    """
    selected = ["-c", f'model_provider="{provider}"'] if provider else []
    with log.open("ab") as err:
        proc = await asyncio.create_subprocess_exec(
            binary, "app-server", *selected, env=codex_env(home), cwd=home,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
            limit=64 << 20)  # one thread/read is one line
    server = AppServer(proc)
    try:
        await server.request("initialize", {"clientInfo": {
            "name": "subsessions-judge", "title": "subsessions judge", "version": "0"}})
        await server.notify("initialized")
        yield server
    finally:
        if proc.returncode is None and server._reader.done() is False:
            await server.close()
        elif proc.returncode is None:
            proc.kill()
            await proc.wait()


# -- one-shot commands -----------------------------------------------------------------------
async def codex(binary: Path, home: Path, *args: str) -> tuple[int, str, str]:
    """`codex ARGS` on `home` (stdin empty): exit code, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        binary, *args, env=codex_env(home), cwd=home, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def migrate_dry_run(binary: Path, home: Path) -> dict[str, Json]:
    """`codex migrate-rollouts --json` (never `--apply`): each file's outcome, by its path
    (as Codex spells it: under the CODEX_HOME it was given)."""
    _, out, err = await codex(binary, home, "migrate-rollouts", "--json")
    start = out.find("{")
    assert start >= 0, f"no JSON from migrate-rollouts: {out!r} {err!r}"
    outcomes = orjson.loads(out[start:])["outcomes"]
    return {o["rollout_path"]: o for o in outcomes}


async def exec_resume(
    binary: Path, home: Path, thread_id: str, provider: str, prompt: str
) -> tuple[int, str, str]:
    """`codex exec resume ID PROMPT` with the thread's own provider selected."""
    return await codex(binary, home, "exec", "resume", "--skip-git-repo-check",
                       "-c", f'model_provider="{provider}"', thread_id, prompt)
