"""The control socket under hostile and boundary input: every bad line gets a JSON-RPC error
(or, a notification, nothing), the connection goes on, other connections and the engine's
sessions are untouched; another uid is refused; a stale socket is cleared; nothing leaks."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from control_support import BOUND, Line, error_code
from scripting import WORKER, Script, spawn_held
from scripting import script as script  # the fixture

from subsessions import Engine, SessionConfig, UnsafeHome
from subsessions.engine.control import client, paths, server
from subsessions.engine.control.paths import ControlUnavailable
from subsessions.engine.control.rpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    MAX_LINE,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REFUSED,
    UNKNOWN_SESSION,
)

CONFIG = SessionConfig(custom_agents=(WORKER,), control=True)
NOBODY = 65534


def request(method: Any, params: Any = None, **extra: Any) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method, **extra}
    if params is not None:
        body["params"] = params
    return orjson.dumps(body) + b"\n"


HOSTILE: list[tuple[str, bytes, int, Any]] = [  # (what, line, code, the id answered)
    ("not JSON", b"{nope\n", PARSE_ERROR, None),
    ("binary", bytes(range(256)).replace(b"\n", b"") + b"\n", PARSE_ERROR, None),
    ("nested past the parser's depth", b"[" * 500_000 + b"\n", PARSE_ERROR, None),
    ("a lone surrogate", b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "x"}\n',
     PARSE_ERROR, None),
    ("a bare number", b"42\n", INVALID_REQUEST, None),
    ("a fractional id", b'{"jsonrpc": "2.0", "id": 1.5, "method": "sessions.list"}\n',
     INVALID_REQUEST, None),
    ("null params", b'{"jsonrpc": "2.0", "id": 7, "method": "sessions.list", "params": null}\n',
     INVALID_PARAMS, 7),
    ("a batch", b'[{"jsonrpc": "2.0", "id": 1, "method": "sessions.list"}]\n',
     INVALID_REQUEST, None),
    ("no jsonrpc", b'{"id": 3, "method": "sessions.list"}\n', INVALID_REQUEST, 3),
    ("jsonrpc 1.0", b'{"jsonrpc": "1.0", "id": 3, "method": "sessions.list"}\n',
     INVALID_REQUEST, 3),
    ("an object id", b'{"jsonrpc": "2.0", "id": {}, "method": "sessions.list"}\n',
     INVALID_REQUEST, None),
    ("a boolean id", b'{"jsonrpc": "2.0", "id": true, "method": "sessions.list"}\n',
     INVALID_REQUEST, None),
    ("a huge id", b'{"jsonrpc": "2.0", "id": 1e400, "method": "sessions.list"}\n',
     PARSE_ERROR, None),
    ("a numeric method", request(5), INVALID_REQUEST, 7),
    ("an unknown method", request("sessions.delete"), METHOD_NOT_FOUND, 7),
    ("a private name", request("__init__"), METHOD_NOT_FOUND, 7),
    ("a long method", request("x" * 100_000), METHOD_NOT_FOUND, 7),
    ("params a list", request("sessions.list", [1]), INVALID_PARAMS, 7),
    ("params a string", request("sessions.list", "all"), INVALID_PARAMS, 7),
    ("an extra field", request("sessions.list", {"all": True}), INVALID_PARAMS, 7),
    ("no session id", request("sessions.cancel", {}), INVALID_PARAMS, 7),
    ("a numeric session id", request("sessions.cancel", {"sessionId": 5}), INVALID_PARAMS, 7),
    ("an empty session id", request("sessions.cancel", {"sessionId": ""}), INVALID_PARAMS, 7),
    ("a path for an id", request("sessions.cancel", {"sessionId": "../../x"}),
     UNKNOWN_SESSION, 7),
    ("an unknown id", request("sessions.send", {"sessionId": "0" * 36, "message": "hi"}),
     UNKNOWN_SESSION, 7),
    ("no message", request("sessions.send", {"sessionId": "0" * 36}), INVALID_PARAMS, 7),
    ("a blank message", request("sessions.send", {"sessionId": "0" * 36, "message": " \n"}),
     INVALID_PARAMS, 7),
    ("message and prompt", request("sessions.send", {"sessionId": "0" * 36, "message": "a",
                                                     "prompt": "b"}), INVALID_PARAMS, 7),
    ("a huge message", request("sessions.send", {"sessionId": "0" * 36,
                                                 "message": "x" * 300_000}), INVALID_PARAMS, 7),
    ("a string id", request("nope", id="abc"), METHOD_NOT_FOUND, "abc"),
]


async def test_each_hostile_line_gets_its_error_and_the_connection_and_engine_go_on(
    home: Path, script: Script
) -> None:
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        cid = await spawn_held(root, script, "busy")
        line = await Line.of(engine)
        for what, data, code, answered_id in HOSTILE:
            await line.send(data)
            answer = await line.answer()
            assert error_code(answer) == code, what
            assert answer["id"] == answered_id, what
            assert isinstance(answer["error"]["message"], str), what
            assert len(answer["error"]["message"]) < 1_000, what  # input is echoed cut
        # notifications (no id) get no answer, whatever they ask; blank lines are skipped
        await line.send(b'{"jsonrpc": "2.0", "method": "nope"}\n\n   \n'
                        b'{"jsonrpc": "2.0", "method": "sessions.list"}\n')
        listing = await line.result("sessions.list")  # the next answer is this one's
        assert [s["status"] for s in listing["sessions"]] == ["idle", "running"]
        assert root.subsessions.status(cid).running
        await line.close()
        await root.subsessions.cancel_child(cid)


async def test_a_line_past_the_limit_is_refused_and_skipped_unread(
    home: Path, script: Script
) -> None:
    async with Engine(home, model_client=script.model) as engine:
        await engine.create_session(CONFIG)
        line = await Line.of(engine)
        writing = asyncio.create_task(line.send(b"[" * (3 * MAX_LINE) + b"\n"))
        answer = await line.answer()
        assert error_code(answer) == INVALID_REQUEST
        assert "longer than" in answer["error"]["message"]
        await asyncio.wait_for(writing, BOUND)
        assert (await line.result("sessions.list"))["pid"] == os.getpid()
        # exactly at the limit is not past it: answered as what it is
        await line.send(b" " * (MAX_LINE - 1) + b"\n")  # blank: nothing to answer
        await line.send(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "x",
                                      "pad": "p" * (MAX_LINE - 100)}) + b"\n")
        assert error_code(await line.answer()) == METHOD_NOT_FOUND
        await line.close()


async def test_one_connections_failure_never_touches_another(home: Path, script: Script) -> None:
    before = len(os.listdir("/proc/self/fd"))
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        cid = await spawn_held(root, script, "busy")
        path = engine.control_path
        assert path is not None
        steady = await Line.open(path)
        half = await Line.open(path)
        await half.send(b'{"jsonrpc": "2.0", "id": 1, "meth')  # and never the rest
        for _ in range(5):  # gone mid-line, gone with its answer unread, reset
            rude = await Line.open(path)
            await rude.send(request("sessions.list") * 50 + b'{"jsonrpc"')
            rude.writer.transport.abort()
        unread = await Line.open(path)
        await unread.send(request("sessions.list") * 2_000)  # answers it never reads
        listing = await steady.result("sessions.list")
        assert [s["sessionId"] for s in listing["sessions"]] == [root.session_id, cid]
        # past the connection limit: refused at once, the others still served
        extra = [await Line.open(path) for _ in range(server.MAX_CONNECTIONS)]
        refused = extra[-1]
        assert error_code(await refused.answer()) == REFUSED
        assert await refused.ended()
        again = (await steady.result("sessions.list"))["sessions"]
        assert [(s["sessionId"], s["status"]) for s in again] == [
            (root.session_id, "idle"), (cid, "running")]
        for line in (*extra, half, unread):
            line.writer.transport.abort()
        assert root.subsessions.status(cid).running
        script.answer("busy", ["done after all that"])
        assert await root.subsessions.wait_child(cid) == "done after all that"
        await steady.close()
    assert not path.exists()
    assert len(os.listdir("/proc/self/fd")) == before  # every descriptor given back


# -- the filesystem: permissions, ownership, stale sockets --------------------------------------
async def test_a_loose_control_folder_is_tightened_and_a_foreign_or_linked_one_refused(
    home: Path, tmp_path: Path, script: Script
) -> None:
    (home / "control").mkdir(parents=True)
    (home / "control").chmod(0o755)
    async with Engine(home, model_client=script.model) as engine:
        await engine.create_session(CONFIG)
    assert stat.S_IMODE((home / "control").stat().st_mode) == 0o700
    linked = tmp_path / "linked"
    (linked / "control").parent.mkdir()
    (linked / "control").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    async with Engine(linked, model_client=script.model) as engine:
        with pytest.raises(ControlUnavailable, match="control"):
            await engine.create_session(CONFIG)
    assert list((tmp_path / "elsewhere").iterdir()) == []
    if os.geteuid() == 0:
        foreign = tmp_path / "foreign"
        (foreign / "control").mkdir(parents=True)
        os.chown(foreign / "control", NOBODY, NOBODY)
        async with Engine(foreign, model_client=script.model) as engine:
            with pytest.raises(UnsafeHome, match="owned by uid 65534"):
                await engine.create_session(CONFIG)


def dead_socket(folder: Path, name: str) -> Path:
    """A socket file nobody listens on any more, as a killed engine leaves it."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / name))
    listener.close()
    return folder / name


async def test_stale_sockets_are_cleared_by_the_next_engine_and_by_readers(
    home: Path, script: Script
) -> None:
    gone_pid = dead_socket(home / "control", "999999999-1.sock")  # no such process
    reused_pid = dead_socket(home / "control", f"{os.getpid()}-999.sock")  # ours, not listening
    other = home / "control" / "notes.txt"
    other.write_text("not a socket's name: left alone")
    async with Engine(home, model_client=script.model) as engine:
        await engine.create_session(CONFIG)
        assert not gone_pid.exists() and not reused_pid.exists()
        assert other.exists()
        assert client.engines(home) == [engine.control_path]
        dead = dead_socket(home / "control", "1-1.sock")  # pid 1 runs: found by connecting
        assert client.engines(home) == [engine.control_path]
        assert not dead.exists()
        assert not paths.stale(engine.control_path)  # type: ignore[arg-type]
    assert paths.sockets(home) == []


# -- another user ---------------------------------------------------------------------------------
AS_NOBODY = """
import ctypes, os, socket, sys
os.setresgid({gid}, {gid}, {gid})
os.setresuid({nobody}, {nobody}, 0 if sys.argv[2] == "fsuid" else {nobody})
if sys.argv[2] == "fsuid":  # reach the 0600 socket as root, be seen as nobody (euid)
    assert ctypes.CDLL(None, use_errno=True).setfsuid(0) >= 0
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    sock.connect(sys.argv[1])
except PermissionError:
    print("EACCES", end=""); sys.exit(0)
try:  # the engine may have refused and closed before this is sent
    sock.sendall(b'{{"jsonrpc": "2.0", "id": 1, "method": "sessions.list"}}\\n')
except (BrokenPipeError, ConnectionResetError):
    pass
sock.settimeout(10)
data = b""
try:  # one answer line: a refusal (then the engine closes), or what a mistake let through
    while not data.endswith(b"\\n") and (chunk := sock.recv(65536)):
        data += chunk
except ConnectionResetError:  # after what was sent: it closed with ours unread
    pass
print(data.decode(), end="")
"""


async def as_nobody(path: Path, how: str, gid: int = NOBODY) -> str:
    """What uid nobody (with group `gid`) reads back from the socket at `path`."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", AS_NOBODY.format(nobody=NOBODY, gid=gid), str(path), how,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    return out.decode()


@pytest.mark.skipif(os.geteuid() != 0, reason="changing uid needs root")
async def test_another_uid_is_refused_by_the_permissions_and_by_its_credentials(
    home: Path, script: Script
) -> None:
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        cid = await spawn_held(root, script, "busy")
        path = engine.control_path
        assert path is not None
        assert await as_nobody(path, "plain") == "EACCES"  # 0600 in a 0700 folder
        # past the file permissions (fsuid root), the peer's uid (euid) is still nobody's
        [line] = (await as_nobody(path, "fsuid")).splitlines()
        answer = orjson.loads(line)
        assert answer["id"] is None and answer["error"]["code"] == REFUSED
        assert "refused" in answer["error"]["message"]
        assert cid not in line  # nothing about the engine's sessions
        mine = await Line.open(path)  # the engine's own user is still served
        assert [s["sessionId"] for s in (await mine.result("sessions.list"))["sessions"]] == [
            root.session_id, cid]
        await mine.close()
        await root.subsessions.cancel_child(cid)


@pytest.mark.skipif(os.geteuid() != 0, reason="changing uid needs root")
async def test_another_uid_with_our_gid_is_refused(home: Path, script: Script) -> None:
    """The uid is what is checked, not the gid: a peer of another uid in the engine's own
    group (root's group 0 here, which a uid/gid mix-up would take for uid 0) is refused."""
    assert os.getegid() == os.geteuid() == 0  # so our gid is also the uid a mix-up compares
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        path = engine.control_path
        assert path is not None
        [line] = (await as_nobody(path, "fsuid", gid=os.getegid())).splitlines()
        answer = orjson.loads(line)
        assert answer["id"] is None and answer["error"]["code"] == REFUSED, answer
        assert root.session_id not in line
