"""The shape of the tree: no import cycle across the
product packages, what both processes share imports neither of them, the
simulator is imported by neither process, and no product module grows past
400 lines (split it along a seam instead)."""

from __future__ import annotations

from tests.import_graph import MAX_LINES, REPO, cycles, graph, modules


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
