"""What the direct HTTP reads rely on in mitmproxy, and their boundary test."""

from __future__ import annotations

from types import SimpleNamespace

from addon.mitm import http_reads


def test_every_assumption_holds_on_the_installed_mitmproxy() -> None:
    assert [name for name, ok in http_reads.assumptions() if not ok] == []


def test_a_layer_unlike_mitmproxys_is_never_at_a_boundary() -> None:
    assert not http_reads.at_request_boundary([SimpleNamespace()])
    assert http_reads.find_server(SimpleNamespace(layer=None, client=object())) is None
