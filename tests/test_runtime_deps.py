"""What the product imports is installed by ``pip install .`` alone (``make
install``, a production host's install): every top-level package a module of
addon/, sidecar/, common/, chainproxy/ or simnode/ imports, outside a
``TYPE_CHECKING`` block, is the standard library's, the product's own, or a
distribution that ``[project].dependencies`` pulls in (with what those require),
never one only the ``test`` or ``bench`` extras install."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata

from tests.import_graph import PRODUCT, REPO, import_nodes, modules

_NAME = re.compile(r"^[A-Za-z0-9._-]+")


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _runtime_closure() -> set[str]:
    """The distributions ``pip install .`` installs: the project's dependencies
    and, transitively, theirs (extras and markers that do not hold left out)."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    todo = [_NAME.match(d).group(0) for d in deps]  # type: ignore[union-attr]
    seen: set[str] = set()
    while todo:
        name = _canon(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for req in metadata.requires(name) or []:
            spec, _, marker = req.partition(";")
            if marker.strip():
                env = {"python_version": "3.12", "sys_platform": sys.platform}
                if "extra" in marker or not _marker_holds(marker, env):
                    continue
            todo.append(_NAME.match(spec.strip()).group(0))  # type: ignore[union-attr]
    return seen


def _marker_holds(marker: str, env: dict[str, str]) -> bool:
    from packaging.markers import Marker  # pip's vendored copy is not importable

    return Marker(marker).evaluate(env)


def _runtime_imports() -> dict[str, set[str]]:
    """Top-level name -> the product modules importing it at run time."""
    out: dict[str, set[str]] = {}
    for mod, path in modules().items():
        for node in import_nodes(path):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                out.setdefault(name.split(".")[0], set()).add(mod)
    return out


def test_every_runtime_import_is_installed_without_the_extras() -> None:
    closure = _runtime_closure()
    assert {"mitmproxy", "aiohttp", "orjson", "redis"} <= closure, sorted(closure)
    owners = metadata.packages_distributions()
    imports = _runtime_imports()
    assert {"mitmproxy", "aiohttp", "orjson", "asyncio"} <= set(imports), sorted(imports)
    outside = {
        name: sorted(mods)
        for name, mods in imports.items()
        if name not in sys.stdlib_module_names
        and name not in PRODUCT
        and not any(_canon(d) in closure for d in owners.get(name, []))
    }
    assert outside == {}, f"imported at run time, installed only by an extra: {outside}"


def test_the_check_sees_a_test_only_package() -> None:
    # hypothesis and pytest are the test extra's: were the product to import them,
    # the check above would name them
    owners = metadata.packages_distributions()
    closure = _runtime_closure()
    for name in ("hypothesis", "pytest", "playwright"):
        assert not any(_canon(d) in closure for d in owners[name]), name
