"""cera-core's modules import one way: no cycle in its import graph, counting the imports
inside functions (a cycle hidden in a function is still a cycle: the modules cannot be
understood, tested or moved apart). Imports under ``if TYPE_CHECKING:`` never run and are
not counted. The graph is read from the source with `ast`, so nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "cera-core" / "src"


def modules(src: Path, package: str = "cera") -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package)."""
    out = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imports(tree: ast.AST):
    """Every import statement of a module, at any depth, but those under TYPE_CHECKING."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(src: Path = SRC) -> dict[str, dict[str, int]]:
    """Module -> {imported module of the package: line of the first such import}."""
    mods = modules(src)
    graph: dict[str, dict[str, int]] = {name: {} for name in mods}
    for name, (path, is_package) in mods.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = alias.name
                    while target and target not in mods:
                        target = target.rpartition(".")[0]
                    targets.append(target)
            else:
                base = here[: len(here) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:  # `from pkg import module` imports the module
                    full = f"{source}.{alias.name}"
                    targets.append(full if full in mods else source)
            for target in targets:
                if target in mods and target != name:
                    graph[name].setdefault(target, node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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
                components.append(set(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for component in components:  # a shortest way back to the start, inside the component
        start = min(component)
        paths = {start: [start]}
        frontier = [start]
        found = None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w == start:
                        found = paths[v] + [start]
                        break
                    if w in component and w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
                if found:
                    break
            frontier = nxt
        out.append(found)
    return out


def describe(graph, cycle: list[str]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


def test_cera_core_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 50 and "cera.engine" in graph  # the graph is really read
    found = cycles(graph)
    assert not found, "import cycles in cera-core:\n" + "\n".join(describe(graph, c) for c in found)


def test_a_cycle_through_a_function_local_import_is_found(tmp_path):
    pkg = tmp_path / "cera"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import g\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\nimport cera.a\n")
    graph = import_graph(tmp_path)
    assert cycles(graph) == [["cera.a", "cera.b", "cera.c", "cera.a"]]
    assert describe(graph, cycles(graph)[0]) == "cera.a (line 1) -> cera.b (line 2) -> cera.c (line 4) -> cera.a"
