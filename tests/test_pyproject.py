"""What pyproject.toml promises a new user (issue 35, item 13): its build requirement admits
no setuptools that cannot read its metadata, and a test skipped for a missing Python package
names the extra that brings it (each `pytest.importorskip(module, reason=...)` says
`pip install 'subsessions[EXTRA]'`, and that extra requires the module's distribution)."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PYPROJECT = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())
# setuptools reads a PEP 639 license expression (`license = "MIT"`) from 77.0 on; 76.1.0 refuses
# it ("`project.license` must be valid exactly by one definition"), as 68 does.
LICENSE_EXPRESSIONS_FROM = 77
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
    return {extra: {canonical(re.match(r"[\w.-]+", requirement)[0])  # type: ignore[index]
                    for requirement in requirements}
            for extra, requirements in PYPROJECT["project"]["optional-dependencies"].items()}


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


def test_the_build_requirement_admits_only_a_setuptools_that_reads_the_license() -> None:
    assert isinstance(PYPROJECT["project"]["license"], str)  # an SPDX expression (PEP 639)
    [setuptools] = [r for r in PYPROJECT["build-system"]["requires"]
                    if canonical(r).startswith("setuptools")]
    lowest = re.fullmatch(r"setuptools\s*>=\s*(\d+)(?:\.\d+)*", setuptools)
    assert lowest is not None, setuptools
    assert int(lowest[1]) >= LICENSE_EXPRESSIONS_FROM, setuptools
