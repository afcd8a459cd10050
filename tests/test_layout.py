"""The shape of the tree: no import cycle across the
product packages, what both processes share imports neither of them, the
simulator is imported by neither process, and no product module grows past
400 lines (split it along a seam instead)."""

from __future__ import annotations

from tests.import_graph import MAX_LINES, PRODUCT, REPO, cycles, graph, modules


def product_graph(*prefixes: str) -> dict[str, set[str]]:
    """The import graph of the modules named ``prefixes``..., checked to be the
    product's (modules found, their imports read): a graph that came out empty
    would pass every test below without checking anything."""
    g = {n: deps for n, deps in graph().items() if n.startswith(prefixes or PRODUCT)}
    assert len(g) >= 10, sorted(g)
    assert sum(len(deps) for deps in g.values()) >= len(g) // 2, "no imports read"
    return g


def test_no_import_cycle_in_the_product() -> None:
    assert cycles(product_graph()) == []


def test_shared_code_imports_neither_process() -> None:
    for name, deps in product_graph("common").items():
        assert not {d for d in deps if not d.startswith("common")}, name


def test_neither_process_imports_the_simulator_or_the_launcher() -> None:
    for name, deps in product_graph("addon", "sidecar").items():
        bad = {d for d in deps if d.startswith(("simnode", "chainproxy"))}
        assert not bad, (name, bad)


def test_no_product_module_over_400_lines() -> None:
    lines = {str(p.relative_to(REPO)): len(p.read_text().splitlines()) for p in modules().values()}
    assert len(lines) >= 100, "the product's modules were not found"
    assert {path: n for path, n in lines.items() if n > MAX_LINES} == {}


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
