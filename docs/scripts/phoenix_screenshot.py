"""Make docs/images/phoenix-trace.png: the trace of one run as Arize Phoenix shows it.

Run from the repository's root, with the [otel,phoenix] extras and Chromium installed
(`apt-get install chromium`):

    python docs/scripts/phoenix_screenshot.py

It starts `phoenix serve` on loopback in a temporary folder, runs a parent that starts two
workers (one of which starts a grandchild) on scripted models with spans exported to it over
OTLP/HTTP, waits until Phoenix has stored every span, and has headless Chromium save the
trace's page. Nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from subsessions import Engine, SessionConfig
from subsessions.testing import WORKER, Script, create, first_prompt, tokens, wait

OUT = Path(__file__).resolve().parents[1] / "images" / "phoenix-trace.png"
PROJECT = "subsessions-docs"
HOST = "127.0.0.1"
SPANS = 4 + 3 + 3 + 8  # the tree below: its agents, chats and tool calls


def _port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _family() -> Script:
    def child(outs: Any, n: int) -> str:
        return str(json.loads(outs[n]["output"])["session_id"])

    script = Script(route=first_prompt)
    script.play("Review the release", [
        lambda outs: [create("worker", "check the changelog"),
                      create("worker", "run the tests"), tokens(1200, 40)],
        lambda outs: [wait(child(outs, 0)), wait(child(outs, 1)), tokens(1500, 30)],
    ])
    script.play("check the changelog", [
        lambda outs: [create("worker", "find the missing entries"), tokens(800, 20)],
        lambda outs: [wait(child(outs, 0)), tokens(900, 25)]])
    script.handlers["run the tests"] = lambda request: ["all 1978 passed", tokens(600, 12)]
    script.handlers["find the missing entries"] = lambda request: [
        "two entries missing", tokens(700, 30)]
    return script


async def _run(url: str) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({
        "service.name": "subsessions", "openinference.project.name": PROJECT}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(f"{url}/v1/traces")))
    script = _family()
    try:
        with tempfile.TemporaryDirectory(prefix="subsessions-shot-") as home:
            async with Engine(home, model_client=script.model,
                              tracer_provider=provider) as engine:
                root = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
                await root.send_and_wait("Review the release")
    finally:
        provider.shutdown()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="phoenix-") as work:
        port = _port()
        env = {**os.environ, "PHOENIX_WORKING_DIR": work, "PHOENIX_HOST": HOST,
               "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(_port()),
               "PHOENIX_TELEMETRY_ENABLED": "false"}
        server = subprocess.Popen([sys.executable, "-m", "phoenix.server.main", "serve"],
                                  env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        url = f"http://{HOST}:{port}"
        try:
            for _ in range(600):  # until it answers (bounded: a minute)
                try:
                    _get(f"{url}/v1/projects")
                    break
                except OSError:
                    time.sleep(0.1)
            asyncio.run(_run(url))
            spans: list[dict[str, Any]] = []
            for _ in range(300):  # until every span is stored
                try:
                    spans = _get(f"{url}/v1/projects/{PROJECT}/spans?limit=1000")["data"]
                except OSError:
                    spans = []
                if len(spans) >= SPANS:
                    break
                time.sleep(0.1)
            project = next(p["id"] for p in _get(f"{url}/v1/projects")["data"]
                           if p["name"] == PROJECT)
            trace = spans[0]["context"]["trace_id"]
            page = f"{url}/projects/{project}/traces/{trace}"
            subprocess.run(["chromium", "--headless", "--no-sandbox", "--hide-scrollbars",
                            "--window-size=1400,820", "--virtual-time-budget=15000",
                            f"--screenshot={OUT}", page], check=True, timeout=120,
                           capture_output=True)
        finally:
            server.terminate()
            server.wait(30)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
