"""Judges from npm (the Codex CLI, Claude Code, the MCP Inspector, the TypeScript SDKs),
installed once into a cache and reused.

`installed(package, prefix, find)` returns what `find(prefix)` finds under the install
(a native binary, checked to be the pinned version; a library's folder), installing
`package` with npm into `prefix` first when it finds nothing. The test is skipped only when
npm is absent or the install fails (offline); a half-done install is never reused (it is
made beside the cache and moved in whole).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT_ENV = "SUBSESSIONS_TESTS_CACHE"


def cache_root() -> Path:
    named = os.environ.get(ROOT_ENV)
    return Path(named) if named else Path.home() / ".cache" / "subsessions-tests"


def installed(package: str, prefix: Path, find: Callable[[Path], Path | None],
              *npm_options: str) -> Path:
    found = find(prefix)
    if found is not None:
        return found
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip(f"npm is not installed (apt-get install nodejs npm), so {package} cannot "
                    "be installed to judge us")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    staging = prefix.with_name(f"{prefix.name}.installing-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        done = subprocess.run(
            [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund",
             "--no-save", *npm_options, package],
            capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0 or find(staging) is None:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"npm could not install {package} (offline?): {last}")
        shutil.rmtree(prefix, ignore_errors=True)
        staging.rename(prefix)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    found = find(prefix)
    assert found is not None, f"{package} installed into {prefix} but nothing runs"
    return found


def library(package: str, folder: str, module: str) -> Path:
    """A folder under the cache where a script placed in it can `import` the npm `module`
    (`package` pinned; its install scripts are not run). Skipped without node."""
    if shutil.which("node") is None:
        pytest.skip(f"node is not installed (apt-get install nodejs npm), so {package} cannot "
                    "judge us")

    def find(prefix: Path) -> Path | None:
        return prefix if (prefix / "node_modules" / module).is_dir() else None

    return installed(package, cache_root() / folder, find, "--ignore-scripts")
