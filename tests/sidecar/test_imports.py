"""The sidecar's modules import each other without a cycle (read from the
source with ``ast``, late imports inside functions included), so each can be
imported, and understood, on its own."""

from __future__ import annotations

from tests.import_graph import cycles, graph


def import_graph() -> dict[str, set[str]]:
    """The sidecar's part of the product's import graph (``tests/import_graph.py``)."""
    return {
        m: {d for d in deps if d.startswith("sidecar")}
        for m, deps in graph().items()
        if m.startswith("sidecar")
    }


def test_the_graph_sees_the_imports() -> None:
    graph = import_graph()
    assert "sidecar.server.routes" in graph["sidecar.server.app"]
    # ``from sidecar.registry import documents``:
    assert "sidecar.registry.documents" in graph["sidecar.server.routes"]


def test_no_import_cycle_in_the_sidecar() -> None:
    assert cycles(import_graph()) == []


def test_a_cycle_would_be_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
