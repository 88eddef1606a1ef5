"""A test skipped for a missing Python package says which extra brings it (issue 35, item 13):
each `pytest.importorskip(module, reason=...)` in the tests names `pip install
'subsessions[EXTRA]'`, and that extra requires the distribution the module comes from."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path

TESTS = Path(__file__).resolve().parent
INSTALL = re.compile(r"pip install 'subsessions\[([\w,-]+)\]'")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def skips() -> list[tuple[str, str, str | None]]:
    """(where, module, reason) of every `importorskip` call in the tests."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "importorskip"):
                module = node.args[0]
                reason = next((k.value for k in node.keywords if k.arg == "reason"), None)
                assert isinstance(module, ast.Constant), f"{path}:{node.lineno}"
                found.append((f"{path.relative_to(TESTS)}:{node.lineno}", module.value,
                              reason.value if isinstance(reason, ast.Constant) else None))
    return found


def extras() -> dict[str, set[str]]:
    """Each extra of pyproject.toml, as the canonical names of the distributions it requires."""
    declared = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())
    return {extra: {canonical(re.match(r"[\w.-]+", requirement)[0])  # type: ignore[index]
                    for requirement in requirements}
            for extra, requirements in declared["project"]["optional-dependencies"].items()}


def distributions_of(module: str, packages: Mapping[str, list[str]]) -> set[str]:
    """The installed distributions whose files hold `module` (their records; nothing imported)."""
    stem = module.replace(".", "/")
    return {canonical(name) for name in packages.get(module.partition(".")[0], [])
            if any(str(f) in (f"{stem}.py", f"{stem}/__init__.py")
                   for f in metadata.distribution(name).files or [])}


def test_every_importorskip_names_the_extra_that_brings_its_module() -> None:
    found, known, packages = skips(), extras(), metadata.packages_distributions()
    assert len(found) > 20  # the scan sees them (each mcp test module skips without mcp)
    wrong = []
    for where, module, reason in found:
        named = INSTALL.search(reason or "")
        if named is None:
            wrong.append(f"{where}: {module}: {reason!r} names no extra")
            continue
        unknown = [e for e in named[1].split(",") if e not in known]
        wanted = set().union(*(known.get(e, set()) for e in named[1].split(",")))
        provided = distributions_of(module, packages)
        if unknown or (provided and not provided & wanted):
            wrong.append(f"{where}: {module} comes from {sorted(provided)}, not from "
                         f"[{named[1]}]")
    assert wrong == []
