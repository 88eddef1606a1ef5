"""Run a stdio server and keep a copy of every line between it and its host.

    python tests/stdio_tap.py LOG -- COMMAND ARGS...

Lines from the host are copied to the server's stdin, lines from the server to stdout, and
each is appended to LOG as one JSON line `{"from": "host"|"server", "line": ...}`: what a
host that shows little of the protocol (Claude Code) was told is then on record.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import IO


def _copy(source: IO[bytes], target: IO[bytes], log: IO[str], side: str,
          lock: threading.Lock) -> None:
    for line in iter(source.readline, b""):
        with lock:
            log.write(json.dumps({"from": side, "line": line.decode(errors="replace")}) + "\n")
            log.flush()
        target.write(line)
        target.flush()
    target.close()


def main(argv: list[str]) -> int:
    log_path, separator, *command = argv
    assert separator == "--" and command, argv
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    lock = threading.Lock()
    with open(log_path, "a", encoding="utf-8") as log:
        host = threading.Thread(target=_copy, daemon=True, args=(
            sys.stdin.buffer, server.stdin, log, "host", lock))
        host.start()
        _copy(server.stdout, sys.stdout.buffer, log, "server", lock)
        return server.wait()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
