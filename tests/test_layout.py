"""The shape of the tree (issue: clear seams): no import cycle across the
product packages, what both processes share imports neither of them, the
simulator is imported by neither process, and no product module grows past
400 lines (split it along a seam instead)."""

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


def graph() -> dict[str, set[str]]:
    """Module -> product modules it imports (``TYPE_CHECKING`` blocks left out:
    they never run)."""
    mods = modules()
    g: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
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


def test_no_import_cycle_in_the_product() -> None:
    assert cycles(graph()) == []


def test_shared_code_imports_neither_process() -> None:
    g = graph()
    for name, deps in g.items():
        if name.startswith("common"):
            assert not {d for d in deps if not d.startswith("common")}, name


def test_neither_process_imports_the_simulator_or_the_launcher() -> None:
    g = graph()
    for name, deps in g.items():
        if name.startswith(("addon", "sidecar")):
            bad = {d for d in deps if d.startswith(("simnode", "chainproxy"))}
            assert not bad, (name, bad)


def test_no_product_module_over_400_lines() -> None:
    big = {
        str(p.relative_to(REPO)): n
        for p in modules().values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert big == {}


MAX_MODULES_PER_FOLDER = 15


def test_no_folder_holds_more_than_15_modules() -> None:
    counts: dict[str, int] = {}
    for path in modules().values():
        if path.name != "__init__.py":
            folder = str(path.parent.relative_to(REPO))
            counts[folder] = counts.get(folder, 0) + 1
    assert {f: n for f, n in counts.items() if n > MAX_MODULES_PER_FOLDER} == {}


def _top_level_names() -> set[str]:
    """Names importable at the top level besides ours: the standard library and
    every installed distribution's top-level packages and modules."""
    import sys
    from importlib.metadata import packages_distributions

    return set(sys.stdlib_module_names) | set(packages_distributions())


def test_nothing_in_addon_shadows_a_real_module() -> None:
    # mitmproxy puts the script's folder (addon/) on sys.path: a package or
    # module there named like a real one (redis, http, websocket…) would be
    # imported in its place by any library asking for the real one.
    real = _top_level_names()
    ours = {p.stem if p.is_file() else p.name for p in (REPO / "addon").iterdir()}
    ours = {n for n in ours if not n.startswith(("_", "."))}
    assert sorted(ours & real) == []
