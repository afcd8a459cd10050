"""The shape of the tree: no import cycle across the
product packages nor between the sidecar's sub-packages, the sidecar's domain
packages below its web layer, what both processes share imports neither of them, the
simulator is imported by neither process, and no product module grows past
400 lines (split it along a seam instead)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.import_graph import MAX_LINES, REPO, cycles, graph, modules, package_graph


def test_no_import_cycle_in_the_product() -> None:
    assert cycles(graph()) == []


def test_sidecar_packages_import_one_way() -> None:
    # The sidecar's rooms in layers: server/ (aiohttp's web side, the handlers)
    # on top, the domain packages below it, each importing only downward; a
    # type named under TYPE_CHECKING counts too.
    assert cycles(package_graph("sidecar")) == []


def _imports_aiohttp_web(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import) and any(
            a.name.startswith("aiohttp.web") for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.startswith("aiohttp.web") or (
                node.module == "aiohttp" and any(a.name == "web" for a in node.names)
            ):
                return True
    return False


def test_sidecar_domain_packages_know_nothing_of_the_web_layer() -> None:
    # Only server/ (and __main__, which runs the app) import aiohttp's web side
    # or the server's modules; the domain packages are below both.
    g = graph(type_checking=True)
    web_layer = ("sidecar.server", "sidecar.__main__")
    domain = {m: p for m, p in modules().items() if m.startswith("sidecar.")}
    domain = {m: p for m, p in domain.items() if not m.startswith(web_layer)}
    assert {m for m in domain if any(d.startswith("sidecar.server") for d in g[m])} == set()
    assert {m for m, p in domain.items() if _imports_aiohttp_web(p)} == set()


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
