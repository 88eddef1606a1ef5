"""The package's import graph has no cycle, counting every import that runs: lazy ones inside
functions too (a cycle hidden behind one is still a cycle in the design). A name imported under
`TYPE_CHECKING` only types: inside the core the manager names the `Child` its session builds
(pyproject's `ignore_imports` lists each). The order of the parts is import-linter's to check
(`lint-imports`, the contracts in pyproject).

`python tests/test_layers.py` prints the graph's strongly connected components and each module's
imports, for a reader who wants to see the house.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "subsessions"


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module's imports of the package's own modules (a name imported from a package
    counts as the submodule when it is one, else as the package's `__init__`)."""
    known = modules(root)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                    for alias in node.names
                ]
            for target in targets:
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:` (imported for types only)."""
    found: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        found.append(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_checker_sees_a_cycle_through_lazy_imports_not_type_names(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg import b\n")
    (package / "b.py").write_text("from pkg.c import C\n")
    (package / "c.py").write_text("from . import a\nC = 1\n")
    (package / "d.py").write_text("import pkg.a\n")
    (package / "e.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.f import F\n")
    (package / "f.py").write_text("from pkg import e\nF = 1\n")
    assert cycles(imports(package)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(imports()) == []


def parts(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between first-level parts: a folder, or a module at the package's root."""
    def part(name: str) -> str:
        return ".".join(name.split(".")[:2])

    found: dict[str, set[str]] = {}
    for name, targets in graph.items():
        found.setdefault(part(name), set()).update(
            part(t) for t in targets if part(t) != part(name))
    return found


def test_no_cycle_between_first_level_parts() -> None:
    """import-linter (`lint-imports`, pyproject's contracts) checks the stack's order; this
    says the same of every part, even one the contract would not name."""
    graph = parts(imports())
    graph.pop("subsessions", None)  # the face (`__init__`) imports what it exports
    assert cycles(graph) == []


if __name__ == "__main__":
    graph = imports(Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE)
    found = cycles(graph)
    sizes = [len(c) for c in found]
    print(f"{len(graph)} modules; largest strongly connected component: {max(sizes, default=1)}")
    for component in found:
        print(f"cycle of {len(component)}: {' '.join(component)}")
    if "-v" in sys.argv:
        for name in sorted(graph):
            print(f"{name} -> {' '.join(sorted(graph[name]))}")
    sys.exit(1 if found else 0)
