"""The shape of the tree: no import cycle across the
product packages nor between the sidecar's sub-packages, the sidecar's domain
packages below its web layer, what both processes share imports neither of them, the
simulator is imported by neither process, and no product module grows past
400 lines (split it along a seam instead)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.import_graph import MAX_LINES, PRODUCT, REPO, cycles, graph, modules, package_graph


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


def addon_packages() -> dict[str, set[str]]:
    """The package-level import graph of addon/: ``addon.<subpackage>`` per
    sub-package, a module directly in addon/ a node of its own;
    ``TYPE_CHECKING`` imports included (a layering is about what a module
    names, not only what runs)."""

    return package_graph("addon", type_checking=True)


def test_addon_packages_import_one_way() -> None:
    # docs/ARCHITECTURE.md, "Floors": each package of addon/ imports only
    # packages below it (rpc at the bottom, hooks at the top)
    assert cycles(addon_packages()) == []


def test_addon_floors_are_in_order() -> None:
    g = addon_packages()
    assert g["addon.rpc"] == set()  # the vocabulary imports nothing of the addon
    assert g["addon.mitm"] <= {"addon.rpc"}  # the adapter: no domain package
    below_hooks = {p for p in g if p not in ("addon.hooks", "addon.addons", "addon.rpcproxy")}
    assert not any("addon.hooks" in g[p] for p in below_hooks)
    steps = {m for m, deps in graph(type_checking=True).items() if m.startswith("addon.steps")}
    g_mod = graph(type_checking=True)
    assert not {m for m in steps if any(d.startswith("addon.runtime") for d in g_mod[m])}


def test_only_hooks_touch_the_holder() -> None:
    allowed = ("addon.hooks.", "addon.addons", "addon.rpcproxy")
    touching = set()
    for name, path in modules().items():
        if not name.startswith("addon") or name.startswith(allowed):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module == "addon.hooks.holder":
                touching.add(name)
            if isinstance(n, ast.ImportFrom | ast.Import) and any(
                a.name in ("RuntimeHolder", "addon.hooks.holder") for a in n.names
            ):
                touching.add(name)
    assert touching == set()
