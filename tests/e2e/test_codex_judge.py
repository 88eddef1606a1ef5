"""The real Codex CLI (0.169.0, offline) lists, reads and resumes the rollouts we write.

Samples are written by our own commands as a user runs them, against a loopback model:
`subsessions demo` (exec parents, children, a grandchild, cancelled children), `subsessions
run` (cli: a completed and a failed child) then `subsessions resume` of it (a second turn),
and `subsessions mcp` driven by the official MCP client (mcp, and its child). A copy of the
home is then judged through Codex's own readers (tests/codex_judge.py): every difference
between what a file holds and what Codex reports is a failure naming the file and field.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TextIO

import orjson
import pytest
from codex_cli import app_server, codex_binary
from codex_judge import Expected, Turn, Verdict, expected, judge_home
from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, error, fake_openai, text
from openai_support import run, tool_outputs

from subsessions import Engine, ScriptedModel

__all__ = ["fake_openai"]  # the fixture, imported so that pytest finds it here

WORKER = "You are a worker sub-session for the Codex judge."
RESUMED = "And once more, briefly?"


@pytest.fixture(scope="module")
def codex() -> Path:
    """The Codex binary (npm-installed into the cache on first use; skipped without npm)."""
    return codex_binary()


def _prompt(request: Recorded) -> str:
    """The last user message of a request, in either wire API."""
    items = request.body.get("input") or request.body.get("messages") or []
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, list):
                return "".join(str(p.get("text", "")) for p in content)
            return str(content)
    return ""


def _script(request: Recorded) -> Reply:
    """The loopback model: a parent that spawns a good and a failing worker and waits for
    both; the workers; the resumed parent; and the MCP connection's child."""
    prompt = _prompt(request)
    if request.api == "chat":
        return text(f"answer to {prompt}")
    if WORKER in str(request.body.get("instructions") or ""):
        if "fail" in prompt:
            return error(400, "scripted failure for the judge")
        return text(f"done: {prompt}")
    if prompt == RESUMED:
        return text("Both workers reported; one failed.")
    done = tool_outputs(request)
    if not done:
        return calls(*(call("create_session", {"session_type": "worker", "prompt": p})
                       for p in ("count the files", "fail on purpose")))
    if len(done) == 2:
        return calls(*(call("wait_session", {"session_id": json.loads(o)["session_id"],
                                             "timeout_ms": 20_000}) for o in done))
    return text("One worker counted, one failed.")


def _home(tmp_path: Path, base_url: str) -> Path:
    """Our home: the loopback model as provider `loopback`, and a worker profile."""
    home = tmp_path / "ours"
    (home / "profiles").mkdir(parents=True)
    (home / "config.toml").write_text(
        f'model = "judge-model"\nmodel_provider = "loopback"\n\n[model_providers.loopback]\n'
        f'base_url = "{base_url}"\nwire_api = "responses"\n', encoding="utf-8")
    (home / "profiles" / "worker.toml").write_text(
        f'name = "worker"\ndescription = "does one job"\ndeveloper_instructions = "{WORKER}"\n',
        encoding="utf-8")
    return home


async def _write_samples(home: Path, fake: FakeOpenAI, cwd: Path, errlog: TextIO) -> None:
    from mcp_support import connect, create

    code, _, err = await run("demo", "--home", str(home), cwd=cwd)
    assert code == 0, err
    code, out, err = await run("run", "--home", str(home), "What do the workers say?", cwd=cwd)
    assert (code, out) == (0, "One worker counted, one failed.\n"), err
    [cli] = [s for s in _samples(home) if s.source == "cli"]
    code, out, err = await run("resume", "--home", str(home), cli.id, RESUMED, cwd=cwd)
    assert (code, out) == (0, "Both workers reported; one failed.\n"), err
    # a fork of it: a new file that starts with the whole history (forked_from_id)
    forking = ScriptedModel([["A fork answers."]])
    async with Engine(home=home, model_client=forking, model="fork-model") as engine:
        fork = await engine.fork_session(cli.id)
        assert await fork.send_and_wait("And from the fork?") == "A fork answers."
    async with connect(home, fake, cwd, errlog) as session:
        child = await create(session, "mcp job", "tester")
        waited = await session.call_tool("wait_session", {"session_id": child,
                                                          "timeout_ms": 20_000})
        assert not waited.is_error


def _samples(home: Path) -> list[Expected]:
    return [expected(p) for p in sorted(home.glob("sessions/*/*/*/rollout-*.jsonl"))]


def _covered(samples: list[Expected]) -> set[str]:
    """What the samples hold, so that a sample the engine stopped writing is noticed."""
    found = {str(s.source) for s in samples if isinstance(s.source, str)}
    found |= {f"depth {s.source['subAgent']['thread_spawn']['depth']}" for s in samples
              if isinstance(s.source, dict)}
    found |= {t.status for s in samples for t in s.turns}
    found |= {"two turns" for s in samples if len(s.turns) == 2}
    found |= {"fork" for s in samples if orjson.loads(s.path.read_bytes().split(b"\n")[0])[
        "payload"].get("forked_from_id")}
    found |= {"tokens" for s in samples if s.tokens} | {"calls" for s in samples if s.calls}
    return found


def _compared(samples: list[Expected]) -> str:
    """The fields compared with what Codex reports, and how many of each."""
    return (f"compared: {len(samples)} x (source, provider, originator, cli_version, path, "
            f"parent, model); {sum(len(s.turns) for s in samples)} turns (id, status, error); "
            f"{sum(bool(s.tokens) for s in samples)} token totals (5 fields); "
            f"{sum(s.instructions is not None for s in samples)} instructions "
            f"({sum(s.instructions == '' for s in samples)} empty); "
            f"{sum(len(s.history) for s in samples)} history messages and "
            f"{sum(len(s.calls) for s in samples)} function calls sent by exec resume")


async def test_codex_lists_reads_and_resumes_every_sample(
    codex: Path, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")
    fake_openai.script = _script
    home = _home(tmp_path, fake_openai.base_url)
    with (tmp_path / "mcp-stderr.log").open("w+") as errlog:
        await _write_samples(home, fake_openai, tmp_path, errlog)
    samples = _samples(home)
    assert _covered(samples) >= {"cli", "exec", "appServer", "depth 1", "depth 2", "completed",
                                 "failed", "interrupted", "two turns", "tokens", "calls", "fork"}
    before = {s.path: s.path.read_bytes() for s in samples}

    verdict = await judge_home(codex, home, tmp_path / "judge")

    print(verdict.counts())
    print(_compared(samples))
    assert {s.path: s.path.read_bytes() for s in _samples(home)} == before  # a copy was judged
    assert verdict.dropped == {}, _report(verdict)
    n = len(samples)
    assert verdict.unlistable == 1  # the MCP connection's own session: it only spawned
    assert (verdict.listed, verdict.read, verdict.eligible, verdict.resumed,
            verdict.exec_resumed) == (n - 1, n, n, n, n)


def _report(verdict: Verdict) -> str:
    lines = [verdict.counts()]
    for path, problems in verdict.dropped.items():
        lines += [Path(path).name, *(f"  {p}" for p in problems)]
    return "\n".join(lines)


# -- the judge itself, on files written by hand ------------------------------------------------
PARENT = "01a20000-0000-7000-8000-00000000a001"
CHILD = "01a20000-0000-7000-8000-00000000a002"
OLD_CHILD = "01a20000-0000-7000-8000-00000000a003"
USAGE = {"input_tokens": 100, "cached_input_tokens": 10, "output_tokens": 20,
         "reasoning_output_tokens": 5, "total_tokens": 120}


def _line(kind: str, payload: dict[str, object]) -> bytes:
    return orjson.dumps({"timestamp": "2026-11-23T10:00:00.000Z", "type": kind,
                         "payload": payload}) + b"\n"


def _rollout(home: Path, sid: str, source: object, ending: dict[str, object],
             omit: tuple[str, ...] = ()) -> None:
    """A DESIGN 3.5 rollout of one turn (source and ending as given); `omit` names keys
    ("turn_context.sandbox_policy", ...) left out, as a writer that drops them would."""
    turn = sid[:-4] + "7777"
    meta = {"id": sid, "timestamp": "2026-11-23T10:00:00Z", "cwd": "/", "originator":
            "subsessions", "cli_version": "0.1.0", "source": source,
            "model_provider": "loopback", "base_instructions": {"text": f"be {sid[-4:]}"}}
    if isinstance(source, dict):
        meta["parent_thread_id"] = PARENT
    usage = {k: v for k, v in USAGE.items() if f"usage.{k}" not in omit}
    records: list[tuple[str, dict[str, object]]] = [
        ("session_meta", meta),
        ("turn_context", {"turn_id": turn, "cwd": "/", "approval_policy": "never",
                          "sandbox_policy": {"type": "read-only"}, "model": "m1",
                          "summary": "auto"}),
        ("task_started", {"type": "task_started", "turn_id": turn}),
        ("response_item", {"type": "message", "role": "user",
                           "content": [{"type": "input_text", "text": "a prompt"}]}),
        ("user_message", {"type": "user_message", "message": "a prompt"}),
        ("token_count", {"type": "token_count",
                         "info": {"total_token_usage": usage, "last_token_usage": usage}}),
        ("ending", {**ending, "turn_id": turn}),
    ]
    folder = home / "sessions" / "2026" / "11" / "23"
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, payload in records:
        kept = {k: v for k, v in payload.items() if f"{name}.{k}" not in omit}
        kind = name if name in ("session_meta", "turn_context", "response_item") else "event_msg"
        lines.append(_line(kind, kept))
    (folder / f"rollout-2026-11-23T10-00-00-{sid}.jsonl").write_bytes(b"".join(lines))


async def test_the_judge_passes_design_shapes_and_names_what_codex_drops(
    codex: Path, tmp_path: Path
) -> None:
    """A parent, a failed `thread_spawn` child (DESIGN 3.5) and a cancelled child in our
    old `subsession` shape: the first two pass; the third is named, field by field."""
    home = tmp_path / "ours"
    spawn = {"parent_thread_id": PARENT, "depth": 1, "agent_role": "tester",
             "agent_nickname": None, "agent_path": None}
    _rollout(home, PARENT, "exec", {"type": "task_complete", "last_agent_message": "ok"})
    _rollout(home, CHILD, {"subagent": {"thread_spawn": spawn}},
             {"type": "task_complete", "last_agent_message": None,
              "error": {"message": "model exploded", "codex_error_info": "other"}})
    _rollout(home, OLD_CHILD, {"subsession": {"parent_session_id": PARENT, "depth": 1,
                                              "session_type": "tester"}},
             {"type": "turn_aborted", "reason": "cancelled"})
    assert expected(next(home.glob(f"**/*{CHILD}.jsonl"))).turns == [
        Turn(CHILD[:-4] + "7777", "failed", "model exploded")]

    verdict = await judge_home(codex, home, tmp_path / "judge")

    assert [Path(p).name for p in verdict.dropped] == [
        f"rollout-2026-11-23T10-00-00-{OLD_CHILD}.jsonl"]
    [problems] = verdict.dropped.values()
    assert "thread/list source: ours {'subAgent'" in problems[0]
    assert any("does not start with session metadata" in p for p in problems)
    assert any(p.startswith("migrate-rollouts: failed") for p in problems)
    assert any(p.startswith("exec resume exit 1") for p in problems)
    assert (verdict.listed, verdict.read, verdict.eligible, verdict.resumed,
            verdict.exec_resumed) == (3, 2, 2, 2, 2)


@pytest.mark.parametrize(("omit", "named"), [
    ("turn_context.sandbox_policy", "thread/read model: ours 'm1', Codex None"),
    ("task_started.turn_id", "thread/read turns"),
    ("usage.reasoning_output_tokens", "no thread/tokenUsage/updated"),
    ("session_meta.base_instructions", "no base_instructions written"),
], ids=lambda v: v.split(".")[-1] if "." in v and " " not in v else "")
async def test_the_judge_names_a_field_the_writer_dropped(
    codex: Path, tmp_path: Path, omit: str, named: str
) -> None:
    """Each field Codex needs (docs/codex-rollouts.md §4), left out of one child: the
    judge fails that file only, naming what Codex lost."""
    home = tmp_path / "ours"
    _rollout(home, PARENT, "exec", {"type": "task_complete", "last_agent_message": "ok"})
    spawn = {"parent_thread_id": PARENT, "depth": 1, "agent_role": None,
             "agent_nickname": None, "agent_path": None}
    _rollout(home, CHILD, {"subagent": {"thread_spawn": spawn}},
             {"type": "task_complete", "last_agent_message": None,
              "error": {"message": "model exploded", "codex_error_info": "other"}},
             omit=(omit,))

    verdict = await judge_home(codex, home, tmp_path / "judge")

    [(path, problems)] = verdict.dropped.items()
    assert path.endswith(f"{CHILD}.jsonl")
    assert any(named in p for p in problems), problems


async def test_an_app_server_request_codex_refuses_is_a_clear_error(
    codex: Path, tmp_path: Path
) -> None:
    from codex_cli import AppServerError, offline_home

    home = tmp_path / "codex-home"
    offline_home(home, "http://127.0.0.1:9/v1", {"loopback"}, "loopback")
    async with app_server(codex, home, tmp_path / "log") as server:
        with pytest.raises(AppServerError, match="-32600 invalid thread id"):
            await server.request("thread/read", {"threadId": "not-a-uuid"})
        assert await server.list_all(modelProviders=[]) == []
    shutil.rmtree(home)


def test_without_npm_the_judge_skips_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from codex_cli import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm on it
    with pytest.raises(pytest.skip.Exception, match=r"npm is not installed \(apt-get install"):
        codex_binary()
    assert not (tmp_path / "empty-cache").exists()
