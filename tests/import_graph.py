"""The product's import graph, read from the source with ``ast`` (shared by
tests/test_layout.py and tests/sidecar/test_imports.py)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRODUCT = ("addon", "sidecar", "common", "chainproxy", "simnode")
MAX_LINES = 400


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PRODUCT:
        for path in (REPO / pkg).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_nodes(path: Path, *, type_checking: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of ``path``; those under ``if TYPE_CHECKING:`` only
    when ``type_checking`` (they never run)."""
    tree = ast.parse(path.read_text(), str(path))
    skip = (
        set()
        if type_checking
        else {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
    )
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip
    ]


def graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> product modules it imports. ``TYPE_CHECKING`` blocks are left
    out (they never run) unless ``type_checking``: a layering drawn for readers
    counts what a module names in its types too."""
    mods = modules()
    g: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for node in import_nodes(path, type_checking=type_checking):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                if node.level:
                    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{base}"
                targets = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = targets or [base]
            else:
                continue
            g[name].update(t for t in targets if t in mods and t != name)
    return g


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

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
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def package_graph(root: str, *, type_checking: bool = True) -> dict[str, set[str]]:
    """``root``'s package-level import graph: a node per sub-package
    (``root.<pkg>``, all its modules in one) and per module directly in ``root``
    (``root.<module>``); an edge where a module of one imports a module of
    another. ``TYPE_CHECKING`` imports count unless told otherwise."""

    def node(module: str) -> str | None:
        parts = module.split(".")
        return ".".join(parts[:2]) if parts[0] == root and len(parts) > 1 else None

    out: dict[str, set[str]] = {}
    for module, deps in graph(type_checking=type_checking).items():
        a = node(module)
        if a is None:
            continue
        out.setdefault(a, set())
        for d in deps:
            b = node(d)
            if b is not None and b != a:
                out[a].add(b)
                out.setdefault(b, set())
    return out
