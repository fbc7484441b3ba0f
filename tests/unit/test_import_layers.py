"""scheduler_app's modules import only downwards: no import cycle, not even a hidden one.

Every ``import`` and ``from ... import`` of the package counts, wherever it stands (a
function, a method, an ``if TYPE_CHECKING:`` block): an import put inside a function to
dodge a cycle is still a cycle. A module's import of its own package (``scheduler_app.db``
from ``scheduler_app.db.sqlite``) is left out, since Python imports that package first
anyway. A lower layer that must call upwards gets a callable passed in or registered from
above (``AppConfig.ready()``, a signal).
"""

from __future__ import annotations

import ast
from pathlib import Path

import scheduler_app

PACKAGE = Path(scheduler_app.__file__).resolve().parent


def module_name(path: Path) -> str:
    """Return the dotted name of the module at ``path`` (an ``__init__`` names its package)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    """Return the package's modules by dotted name; migrations are left out."""
    return {
        module_name(path): path
        for path in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in path.relative_to(PACKAGE).parts
    }


def imported_names(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> list[str]:
    """Return the dotted names ``node`` may import (for ``from m import x``: ``m.x`` and ``m``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    source = node.module or ""
    if node.level:
        base = importer if is_package else importer.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        source = base + ("." + source if source else "")
    return [*("%s.%s" % (source, alias.name) for alias in node.names), source]


def import_graph() -> dict[str, dict[str, int]]:
    """Return, for each module, the package's modules it imports, each with a line number."""
    modules = package_modules()

    def owner(name: str) -> str | None:
        # "scheduler_app.db.DatabaseNow" is the module scheduler_app.db.
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for importer, path in modules.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in imported_names(node, importer, path.name == "__init__.py"):
                target = owner(name) if name.split(".")[0] == PACKAGE.name else None
                if target and target != importer and not importer.startswith(target + "."):
                    edges[target] = min(node.lineno, edges.get(target, node.lineno))
        graph[importer] = edges
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Return the strongly connected components of two or more modules (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    """Return the cycle's modules and, for each, what it imports inside the cycle (line)."""
    members = set(component)
    lines = ["cycle of %d modules:" % len(component)]
    for module in component:
        inside = sorted(
            (target, line) for target, line in graph[module].items() if target in members
        )
        lines.append(
            "  %s imports %s"
            % (module, ", ".join("%s (line %d)" % (target, line) for target, line in inside))
        )
    return "\n".join(lines)


def test_the_graph_sees_imports_inside_functions():
    """The walk finds an import that stands inside a function, not only module-level ones."""
    graph = import_graph()

    # scheduler_app.apps imports its signal handlers and checks in AppConfig.ready().
    assert "scheduler_app.retention" in graph["scheduler_app.apps"]
    assert graph["scheduler_app.models"]  # and plain module-level imports, of course


def test_no_module_imports_a_module_that_imports_it_back():
    """No import cycle among scheduler_app's modules, counting imports inside functions."""
    graph = import_graph()

    cycles = strongly_connected(graph)

    assert not cycles, "scheduler_app has %d import cycle(s):\n%s" % (
        len(cycles),
        "\n".join(describe(component, graph) for component in cycles),
    )
