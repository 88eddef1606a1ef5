"""The real Codex CLI as the judge of a home of our rollouts (DESIGN 3.5, issue 14).

`judge_home` copies the home, then asks Codex, through its own readers: `thread/list` (every
source kind, every provider), `thread/read` of each file, `codex migrate-rollouts --json` (a
dry run), `thread/resume` of each (the token totals it restores), and `codex exec resume ID`
against a loopback model server (the request it sends). What Codex says is compared field by
field with what the file holds, read here straight from its JSON lines (not through our own
reader), and every difference is one line in `Verdict.dropped[path]`.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from codex_cli import AppServerError, app_server, exec_resume, migrate_dry_run, offline_home
from fake_openai import FakeOpenAI, Recorded, text

Json = dict[str, Any]
SOURCE_KINDS = ["cli", "vscode", "exec", "appServer", "subAgent", "subAgentReview",
                "subAgentCompact", "subAgentThreadSpawn", "subAgentOther", "unknown"]
USAGE = {"input_tokens": "inputTokens", "cached_input_tokens": "cachedInputTokens",
         "output_tokens": "outputTokens", "reasoning_output_tokens": "reasoningOutputTokens",
         "total_tokens": "totalTokens"}
RESUME_PROMPT = "judge: one more turn, please"


@dataclass
class Turn:
    id: str | None
    status: str  # Codex's words: completed | failed | interrupted
    error: str | None = None


@dataclass
class Expected:
    """What one rollout file says, in the terms Codex reports it."""

    path: Path
    id: str
    source: Any
    provider: str | None
    originator: str | None
    cli_version: str | None
    instructions: str | None
    parent: str | None
    model: str | None = None
    listable: bool = False
    """Has a `user_message` event: Codex's thread/list leaves out a thread without one
    (as it does its own empty threads), e.g. an MCP connection's session that only spawned."""
    turns: list[Turn] = field(default_factory=list)
    tokens: Json | None = None
    history: list[tuple[str, str]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)


def _child_source(meta: Json) -> tuple[Json, str] | None:
    """Codex's `subAgent.thread_spawn` for a child, in either of our shapes, and its parent."""
    source = meta.get("source")
    if not isinstance(source, dict):
        return None
    spawn = (source.get("subagent") or {}).get("thread_spawn")
    if isinstance(spawn, dict):
        parent, depth, role = spawn.get("parent_thread_id"), spawn.get("depth"), spawn.get(
            "agent_role")
    elif isinstance(old := source.get("subsession"), dict):  # ours before DESIGN 3.5
        parent, depth, role = old.get("parent_session_id"), old.get("depth"), old.get(
            "session_type")
    else:
        return None
    shown = {"parent_thread_id": parent, "depth": depth, "agent_path": None,
             "agent_nickname": None, "agent_role": role}
    return {"subAgent": {"thread_spawn": shown}}, str(parent)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))


def expected(path: Path) -> Expected:
    """Read one rollout as Codex should: its meta, turns, last token totals and history."""
    records = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    meta = records[0]["payload"]
    child = _child_source(meta)
    plain = "appServer" if meta.get("source") == "mcp" else meta.get("source")
    instructions = meta.get("base_instructions")
    out = Expected(
        path=path, id=meta["id"], source=child[0] if child else plain,
        provider=meta.get("model_provider"), originator=meta.get("originator"),
        cli_version=meta.get("cli_version"),
        instructions=instructions.get("text") if isinstance(instructions, dict)
        else meta.get("instructions"),  # ours before 3.5: Codex must still not drop it
        parent=child[1] if child else None)
    for record in records[1:]:
        kind, payload = record.get("type"), record.get("payload") or {}
        event = payload.get("type")
        if kind == "turn_context":
            out.model = payload.get("model")
        elif kind == "response_item" and event == "message":
            if payload.get("role") in ("user", "assistant"):
                out.history.append((payload["role"], _text(payload.get("content"))))
        elif kind == "response_item" and event == "function_call":
            out.calls.append(str(payload.get("call_id")))
        elif kind != "event_msg":
            continue
        elif event == "user_message":
            out.listable = True
        elif event == "task_started":
            out.turns.append(Turn(payload.get("turn_id"), "interrupted"))  # until it ends
        elif event == "token_count" and isinstance(payload.get("info"), dict):
            out.tokens = payload["info"].get("total_token_usage")
        elif out.turns and event == "task_complete":
            error = payload.get("error")
            out.turns[-1].status = "failed" if error else "completed"
            out.turns[-1].error = error.get("message") if isinstance(error, dict) else None
        elif out.turns and event == "error":  # ours before 3.5 ended a failed task so
            out.turns[-1].status, out.turns[-1].error = "failed", payload.get("message")
    return out


def _differ(problems: list[str], what: str, ours: Any, codex: Any) -> None:
    if ours != codex:
        problems.append(f"{what}: ours {ours!r}, Codex {codex!r}")


def check_listed(want: Expected, listed: Json | None) -> list[str]:
    if listed is None:
        return [] if not want.listable else ["thread/list: not listed"]
    if not want.listable:
        return ["thread/list: listed a thread without a user message (Codex never did)"]
    problems: list[str] = []
    for name, ours, codex in (
        ("source", want.source, listed.get("source")),
        ("modelProvider", want.provider, listed.get("modelProvider")),
        ("originator", want.originator, listed.get("originator")),
        ("cliVersion", want.cli_version, listed.get("cliVersion")),
        ("path", str(want.path), listed.get("path")),
    ):
        _differ(problems, f"thread/list {name}", ours, codex)
    return problems


def check_read(want: Expected, thread: Json) -> list[str]:
    problems: list[str] = []
    _differ(problems, "thread/read model", want.model, thread.get("model"))
    _differ(problems, "thread/read parentThreadId", want.parent, thread.get("parentThreadId"))
    _differ(problems, "thread/read source", want.source, thread.get("source"))
    got = [Turn(t["id"], t["status"], (t.get("error") or {}).get("message"))
           for t in thread.get("turns", [])]
    _differ(problems, "thread/read turns", want.turns, got)
    return problems


def check_tokens(want: Expected, note: Json | None) -> list[str]:
    if want.tokens is None:
        return []
    if note is None:
        return ["thread/resume: no thread/tokenUsage/updated (token counts dropped)"]
    total = note["tokenUsage"]["total"]
    problems: list[str] = []
    for ours, codex in USAGE.items():
        _differ(problems, f"tokens {ours}", want.tokens.get(ours), total.get(codex))
    return problems


def _messages(request: Recorded) -> list[tuple[str, str]]:
    return [(i.get("role"), _text(i.get("content"))) for i in request.body.get("input", [])
            if i.get("type", "message") == "message"]


def check_request(want: Expected, request: Recorded | None) -> list[str]:
    """`exec resume` sent our instructions (as a developer message) and our history."""
    if request is None:
        return ["exec resume: no model request"]
    problems: list[str] = []
    sent = _messages(request)
    if want.instructions and ("developer", want.instructions) not in sent:
        problems.append(f"exec resume: our instructions {want.instructions[:60]!r} not sent "
                        "as a developer message")
    # Codex's context blocks are `<tag>...`; any other developer text is base instructions
    base = [t for role, t in sent if role == "developer" and t and not t.startswith("<")]
    if want.instructions == "" and base:
        problems.append(f"exec resume: we wrote no instructions, Codex sent {base[0][:60]!r}")
    if want.instructions is None:
        problems.append("no base_instructions written: exec resume sends Codex's own prompt")
    rest = iter(sent)  # our history, in order, ahead of the new prompt
    missing = [m for m in want.history if m not in rest]
    if missing:
        problems.append(f"exec resume: history not sent: {missing[:3]}")
    calls = [i.get("call_id") for i in request.body.get("input", [])
             if i.get("type") == "function_call"]
    _differ(problems, "exec resume function calls", want.calls, calls)
    if not sent or sent[-1] != ("user", RESUME_PROMPT):
        problems.append("exec resume: the new prompt is not the last message")
    return problems


@dataclass
class Verdict:
    files: int = 0
    unlistable: int = 0
    listed: int = 0
    read: int = 0
    eligible: int = 0
    resumed: int = 0
    exec_resumed: int = 0
    dropped: dict[str, list[str]] = field(default_factory=dict)

    def counts(self) -> str:
        return (f"codex judge: {self.files} file(s): listed {self.listed} (+{self.unlistable} "
                f"without a user message, which Codex does not list), read {self.read}, "
                f"migrate eligible {self.eligible}, resumed {self.resumed}, "
                f"exec resumed {self.exec_resumed}, nothing dropped "
                f"{self.files - len(self.dropped)}")


async def judge_home(binary: Path, ours: Path, work: Path) -> Verdict:
    """Judge a copy of `ours` (made under `work`) with Codex; the original is not touched."""
    home, wanted = _copy(ours, work)
    providers = {w.provider for w in wanted.values() if w.provider} or {"loopback"}
    verdict = Verdict(files=len(wanted),
                      unlistable=sum(not w.listable for w in wanted.values()))
    problems: dict[str, list[str]] = {path: [] for path in wanted}
    async with FakeOpenAI() as model:
        model.script = lambda request: text("judged")
        offline_home(home, model.base_url, providers, sorted(providers)[0])
        log = work / "codex-stderr.log"
        async with app_server(binary, home, log) as server:
            listed = {t["path"]: t for t in await server.list_all(
                sourceKinds=SOURCE_KINDS, modelProviders=[])}
            for path, want in wanted.items():
                problems[path] += check_listed(want, listed.get(path))
                verdict.listed += path in listed
                try:
                    thread = (await server.request(
                        "thread/read", {"threadId": want.id, "includeTurns": True}))["thread"]
                except AppServerError as exc:
                    problems[path].append(f"thread/read failed: {exc}")
                    continue
                verdict.read += 1
                problems[path] += check_read(want, thread)
            outcomes = await migrate_dry_run(binary, home)
            for path in wanted:
                status = outcomes.get(path, {}).get("status")
                verdict.eligible += status == "eligible"
                if status != "eligible":
                    problems[path].append(f"migrate-rollouts: {status}: "
                                          f"{outcomes.get(path, {}).get('message')}")
        for provider in sorted(providers):
            async with app_server(binary, home, log, provider) as server:
                for path, want in wanted.items():
                    if (want.provider or "loopback") == provider:
                        problems[path] += await _resume(server, want, verdict)
        for path, want in wanted.items():
            before = len(model.requests)
            code, _, err = await exec_resume(binary, home, want.id, want.provider or "loopback",
                                             RESUME_PROMPT)
            if code != 0:
                problems[path].append(f"exec resume exit {code}: {err.strip()[-300:]}")
                continue
            verdict.exec_resumed += 1
            sent = model.requests[before:]
            problems[path] += check_request(want, sent[0] if sent else None)
    verdict.dropped = {path: [p.replace(str(home), "$CODEX_HOME") for p in found]
                       for path, found in problems.items() if found}
    return verdict


def _copy(ours: Path, work: Path) -> tuple[Path, dict[str, Expected]]:
    """The judge's copy of the home's sessions (a real path: Codex reports paths under
    it as given), and what each file says, by path."""
    home = (work / "codex-home").resolve()
    shutil.copytree(ours / "sessions", home / "sessions")
    found = sorted(home.glob("sessions/*/*/*/rollout-*.jsonl"))
    return home, {str(path): expected(path) for path in found}


async def _resume(server: Any, want: Expected, verdict: Verdict) -> list[str]:
    """`thread/resume` (no model call): the model and token totals Codex restores."""
    try:
        result = await server.request("thread/resume", {"threadId": want.id})
    except AppServerError as exc:
        return [f"thread/resume failed: {exc}"]
    verdict.resumed += 1
    problems: list[str] = []
    if want.model is not None:
        _differ(problems, "thread/resume model", want.model, result.get("model"))
    note = None
    if want.tokens is not None:
        try:
            note = await server.notification(
                "thread/tokenUsage/updated", want.id, timeout=2.0)
        except TimeoutError:
            note = None
    problems += check_tokens(want, note)
    await server.request("thread/unsubscribe", {"threadId": want.id})
    return problems
