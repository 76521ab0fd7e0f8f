"""No import cycle anywhere in veri_tui, a function-level import included: the graph is built
from every module's syntax tree (every `import` and `from ... import` statement wherever it
stands: module level, a function, a class body), leaving out only what runs under `if
TYPE_CHECKING:`, which never runs. A name imported from a package is an arrow to the
submodule of that name when there is one, else to the package. import-linter's acyclic
contracts see only module-level siblings; this sees every module, at any depth."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules() -> dict[str, Path]:
    """Every module of veri_tui by dotted name (a package by its own name)."""
    out = {}
    for path in sorted((ROOT / "veri_tui").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:` (its body; its else still runs)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _imported(name: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names ``node`` (in module ``name``) imports."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's package upwards
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, *([base] if base else [])])
    return [f"{base}.{a.name}" for a in node.names] + [base]


def import_graph() -> dict[str, set[str]]:
    """module -> the veri_tui modules it imports at run time (function-level ones included)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            found = _imported(name, path, node)
            if isinstance(node, ast.ImportFrom):
                # `from pkg import sub` is the submodule when there is one, else the package.
                subs = [f for f in found[:-1] if f in modules]
                found = subs if len(subs) == len(found) - 1 else [*subs, found[-1]]
            edges |= {f for f in found if f in modules and f != name}
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two modules or more (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_graph_sees_function_level_imports() -> None:
    graph = import_graph()
    # cli.py imports each command's module by name (importlib); its own imports are read.
    assert "veri_tui.commands.options" in graph["veri_tui.cli"]
    assert len(graph) > 200


def test_no_import_cycle_anywhere() -> None:
    assert cycles(import_graph()) == []
