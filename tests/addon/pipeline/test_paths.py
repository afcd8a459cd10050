"""Routing by HTTP method and path: RPC, refused, or the sidecar's."""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.pipeline.paths import Preflight, ProxyHealth, RpcRoute, SidecarRoute, classify
from addon.rpc.jsonrpc import INVALID_REQUEST, METHOD_NOT_FOUND, Refusal
from tests.examples import examples

NETS = ("finney", "test")


@pytest.mark.parametrize(
    ("path", "network"),
    [
        ("/rpc/v1/finney", "finney"),
        ("/rpc/v1/test", "test"),
        ("/rpc/v1/finney/", "finney"),
        ("/rpc/v1/finney?x=1", "finney"),
        ("/rpc/v1/test/?a=b&c=d", "test"),
        ("//rpc/v1/finney", "finney"),
        ("/rpc//v1/finney", "finney"),
    ],
)
def test_post_to_configured_network_is_rpc(path: str, network: str) -> None:
    assert classify("POST", path, NETS) == RpcRoute(network)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "HEAD"])
def test_wrong_http_method_is_405_with_allow_post(method: str) -> None:
    r = classify(method, "/rpc/v1/finney", NETS)
    assert isinstance(r, Refusal)
    assert (r.status, r.code) == (405, INVALID_REQUEST)
    assert ("Allow", "POST") in r.headers


def test_the_proxys_own_health_is_a_get_of_rpc_healthz() -> None:
    for path in ("/rpc/healthz", "//rpc/healthz", "/rpc/%68ealthz", "/x/../rpc/healthz"):
        assert classify("GET", path, NETS) == ProxyHealth()
    assert classify("HEAD", "/rpc/healthz", NETS) == ProxyHealth()
    r = classify("POST", "/rpc/healthz", NETS)
    assert isinstance(r, Refusal) and r.status == 405 and ("Allow", "GET, HEAD") in r.headers
    assert isinstance(classify("GET", "/healthz", NETS), SidecarRoute)  # the sidecar's


def test_options_is_a_preflight() -> None:
    assert isinstance(classify("OPTIONS", "/rpc/v1/finney", NETS), Preflight)
    assert isinstance(classify("OPTIONS", "/rpc/v1/test/", NETS), Preflight)


@pytest.mark.parametrize(
    "path",
    [
        "/rpc/v2/finney",
        "/rpc/v1/nope",
        "/rpc/v1/Finney",
        "/rpc",
        "/rpc/",
        "/rpc/v1",
        "/rpc/v1/",
        "/rpc/v1/finney/extra",
        "/rpc/finney",
        "/rpc?x=1",
    ],
)
@pytest.mark.parametrize("method", ["POST", "GET", "OPTIONS"])
def test_unknown_network_or_version_is_404_method_not_found(path: str, method: str) -> None:
    r = classify(method, path, NETS)
    assert isinstance(r, Refusal)
    assert (r.status, r.code) == (404, METHOD_NOT_FOUND)


def test_a_network_not_configured_is_404() -> None:
    r = classify("POST", "/rpc/v1/test", ("finney",))
    assert isinstance(r, Refusal) and r.status == 404


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/internal",
        "/api/v1/internal/",
        "/api/v1/internal/x",
        "/api/v1/internal/routes/finney",
        "/api/v1/internal/usage?batch=1",
        "/api/v1/%69nternal/x",
        "/api/v1/%69%6E%74ernal/routes/finney",
        "/api%2Fv1%2Finternal/x",
        "/x/../api/v1/internal",
        "/x/%2e%2e/api/v1/internal/usage",
        "/api/v1/./internal/x",
        "/api/v2/../v1/internal",
        "//api/v1/internal",
        "///api//v1///internal/x",
        "/../../api/v1/internal",
    ],
)
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_internal_paths_are_refused_404(path: str, method: str) -> None:
    r = classify(method, path, NETS)
    assert isinstance(r, Refusal)
    assert r.status == 404


@pytest.mark.parametrize(
    "path",
    ["/api/v1/%2569nternal/routes/finney", "/api/v1/%2569nternal", "/%2e%2e/api/v1/%2569nternal"],
)
def test_double_encoded_internal_path_does_not_reach_the_sidecar_internal_api(path: str) -> None:
    r = classify("GET", path, NETS)
    if isinstance(r, SidecarRoute):
        seen_by_sidecar = unquote(r.path.partition("?")[0])
        assert not seen_by_sidecar.startswith("/api/v1/internal")
    else:
        assert isinstance(r, Refusal) and r.status == 404


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/", "/"),
        ("", "/"),
        ("/api/v1/usage?network=finney", "/api/v1/usage?network=finney"),
        ("/api/v1/endpoints/callable?page=2", "/api/v1/endpoints/callable?page=2"),
        ("/a/./b/../c", "/a/c"),
        ("//healthz", "/healthz"),
        ("/metrics/", "/metrics/"),  # the trailing slash kept: the sidecar tells them apart
        ("/a/b/../c/", "/a/c/"),
        ("/api/v1/usage/?network=finney", "/api/v1/usage/?network=finney"),
        ("/api/v1/internalx", "/api/v1/internalx"),
        ("/api/v1/internal-notes", "/api/v1/internal-notes"),
        ("/../../etc/passwd", "/etc/passwd"),
        ("/api/v1/endpoints/endpoint-srf-0123456789abcdef", None),
        ("/api/v1/usage?network=finney&x=%2F", "/api/v1/usage?network=finney&x=%2F"),
        ("/RPC/v1/finney", "/RPC/v1/finney"),
    ],
)
@pytest.mark.parametrize("method", ["GET", "POST", "HEAD"])
def test_other_paths_go_to_the_sidecar_normalised(
    raw: str, expected: str | None, method: str
) -> None:
    r = classify(method, raw, NETS)
    assert isinstance(r, SidecarRoute)
    assert r.path == (raw if expected is None else expected)


@settings(max_examples=examples(300), deadline=None)
@given(
    segments=st.lists(
        st.sampled_from(
            ["api", "v1", "internal", "%69nternal", "..", ".", "", "x", "%2e%2e", "%2F", "rpc"]
        ),
        max_size=8,
    ),
    query=st.sampled_from(["", "?a=1", "?next=/api/v1/internal"]),
    method=st.sampled_from(["GET", "POST", "OPTIONS"]),
)
def test_property_no_path_reaches_internal_via_the_sidecar_route(
    segments: list[str], query: str, method: str
) -> None:
    r = classify(method, "/" + "/".join(segments) + query, NETS)
    assert isinstance(r, RpcRoute | Preflight | SidecarRoute | Refusal)
    if isinstance(r, SidecarRoute):
        path = r.path.partition("?")[0]
        assert path.startswith("/")
        assert not path.startswith("//")
        assert path != "/api/v1/internal" and not path.startswith("/api/v1/internal/")
        assert "/../" not in path + "/" and "/./" not in path + "/"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # mitmproxy hands bytes that are not UTF-8 over as lone surrogates
        ("/r\udcffc/v1/\udcffinney", "/r%FFc/v1/%FFinney"),
        ("/api/v1/usage?network=fin\udcffney&x=%2F", "/api/v1/usage?network=fin%FFney&x=%2F"),
        ("/dashboard?q=a b\u00e9", "/dashboard?q=a%20b%C3%A9"),
    ],
)
def test_bytes_that_are_not_utf8_go_to_the_sidecar_percent_encoded(raw: str, expected: str) -> None:
    r = classify("POST", raw, NETS)
    assert isinstance(r, SidecarRoute) and r.path == expected
    r.path.encode("ascii")  # what the sidecar client sends as it is


def test_an_rpc_path_with_bytes_that_are_not_utf8_is_a_404_naming_them() -> None:
    r = classify("POST", "/rpc/v1/\udcffinney", NETS)
    assert isinstance(r, Refusal) and r.status == 404
    assert "/rpc/v1/%FFinney" in r.message
    r.message.encode("utf-8")  # the JSON body can carry it


@settings(max_examples=examples(300), deadline=None)
@given(st.binary(max_size=40), st.sampled_from(["GET", "POST", "OPTIONS"]))
def test_property_any_path_bytes_get_a_route(raw: bytes, method: str) -> None:
    path = "/" + raw.decode("utf-8", "surrogateescape")  # as mitmproxy decodes a path
    r = classify(method, path, NETS)
    if isinstance(r, SidecarRoute):
        r.path.encode("ascii")
    elif isinstance(r, Refusal):
        r.message.encode("utf-8")
