"""The package's import graph has no cycle, counting every import: lazy ones inside functions and
`TYPE_CHECKING` ones too (a cycle hidden behind either is still a cycle in the design).

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
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
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


# ARCHITECTURE.md's layers, bottom to top: a module imports only from its own layer or below.
LAYERS: dict[int, tuple[str, ...]] = {
    0: ("_version", "_util", "_util.clock", "_util.collector", "batch", "budget",
        "engine.control", "errors", "handlers",
        "ids", "items", "mcp", "otel.wire",
        "rollouts.status", "rollouts.values", "_util.safe_read", "tools.process",
        "tools.safe_commands", "_util.urls", "usage"),
    1: ("children", "config", "environment", "events", "handlers.ask_user",
        "handlers.parent_message", "instructions",
        "ledger", "meter",
        "profiles", "settings", "specs", "tools.schema", "tree"),
    2: ("batch.journal", "batch.output", "batch.source", "batch.template", "engine.control.client",
        "engine.control.paths", "engine.control.rpc", "child", "figures", "kit", "origin",
        "tools.mcp", "tools.mcp.client", "tools.mcp.config", "tools.mcp.link", "mcp.transcript",
        "models", "models.base",
        "models.factory", "models.openai_chat", "models.openai_common", "models.openai_errors",
        "models.openai_responses", "models.scripted", "otel", "otel.content", "otel.remote",
        "otel.tracing", "rollouts", "rollouts.files",
        "rollouts.follow", "rollouts.index", "rollouts.lines", "rollouts.listing",
        "rollouts.reader",
        "rollouts.recorder", "rollouts.records", "rollouts.render", "rollouts.summary", "tools",
        "waits",
        "tools.apply_patch", "tools.approval", "tools.beneath",
        "tools.context", "tools.errors", "tools.files", "tools.limits", "tools.patch",
        "tools.patch_commit",
        "tools.sandbox", "tools.seccomp", "tools.shell"),
    3: ("dispatch", "engine_mcp", "runtime", "services"),
    4: ("batch.runner", "batch.planning", "child_book", "composition", "loop", "manager",
        "parts", "spawning", "task_budget", "task_children", "task_hooks"),
    5: ("handlers.subsessions", "session_state"),
    6: ("conversation", "resume", "session", "task"),
    7: ("engine.control.methods", "engine.control.server", "engine.facade", "engine.close",
        "ray", "ray.backend",
        "ray.channel", "ray.groups", "ray.host", "ray.ledger", "ray.placement", "ray.replies",
        "ray.shard", "ray.shard_child", "ray.spec", "ray.wire"),
    8: ("", "__main__", "_exports", "engine", "engine.access", "cli", "cli.batch",
        "cli.batch_progress",
        "cli.engine", "cli.parser", "cli.profiles", "cli.rollouts", "cli.run", "cli.demo",
        "cli.demo_work", "mcp.connection", "mcp.app", "mcp.catalog", "mcp.front",
        "mcp.resources", "mcp.server",
        "mcp.progress", "mcp.run", "mcp.runs", "mcp.task_listen", "mcp.task_store", "mcp.tasks",
        "serve", "serve.connection", "serve.framing", "serve.options",
        "serve.history", "serve.peer", "serve.served", "serve.server", "serve.stdio", "serve.wire",
        "testing",
        "watch", "watch.app", "watch.cells", "watch.command", "watch.control", "watch.follower",
        "watch.forest", "watch.prompt", "watch.stats", "watch.table"),
}


def layer_of() -> dict[str, int]:
    return {
        f"subsessions.{name}".rstrip("."): layer
        for layer, names in LAYERS.items() for name in names
    }


def test_every_module_has_a_layer() -> None:
    assert sorted(set(imports()) - set(layer_of())) == []
    assert sorted(set(layer_of()) - set(imports())) == []


def test_every_import_points_to_the_same_or_a_lower_layer() -> None:
    layer = layer_of()
    upward = [
        f"{name} (L{layer[name]}) -> {target} (L{layer[target]})"
        for name, targets in sorted(imports().items()) for target in sorted(targets)
        if layer[target] > layer[name]
    ]
    assert upward == []


def test_the_checker_sees_a_cycle_through_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\n"
    )
    (package / "c.py").write_text("from . import a\n")
    (package / "d.py").write_text("import pkg.a\n")
    assert cycles(imports(package)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(imports()) == []


def longest_chain(graph: dict[str, set[str]], start: str, goal: str | None = None) -> list[str]:
    """The longest import chain from `start` (to `goal`, or to any module): its floors."""
    memo: dict[str, list[str]] = {}

    def down(name: str) -> list[str]:
        if name not in memo:
            memo[name] = []  # the graph has no cycle (tested above): this is never read
            best: list[str] = [] if goal is not None and name != goal else [name]
            for target in sorted(graph[name]):
                below = down(target)
                if below and len(below) + 1 > len(best):
                    best = [name, *below]
            memo[name] = best
        return memo[name]

    return down(start)


def test_the_engine_core_is_at_most_four_floors() -> None:
    """The tower from a session down to the runtime (ARCHITECTURE.md: at most four): the
    manager and the hooks ask the runtime for what they use through `Services`."""
    assert len(longest_chain(imports(), "subsessions.session", "subsessions.runtime")) <= 4


if __name__ == "__main__":
    graph = imports(Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE)
    found = cycles(graph)
    sizes = [len(c) for c in found]
    print(f"{len(graph)} modules; largest strongly connected component: {max(sizes, default=1)}")
    for component in found:
        print(f"cycle of {len(component)}: {' '.join(component)}")
    if not found and "subsessions.session" in graph:
        tower = longest_chain(graph, "subsessions.session", "subsessions.runtime")
        print(f"floors from session to runtime: {len(tower)} ({' -> '.join(tower)})")
        whole = max((longest_chain(graph, name) for name in sorted(graph)), key=len)
        print(f"longest import chain: {len(whole)} modules ({' -> '.join(whole)})")
    if "-v" in sys.argv:
        for name in sorted(graph):
            print(f"{name} -> {' '.join(sorted(graph[name]))}")
    sys.exit(1 if found else 0)
