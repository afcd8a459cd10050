"""Metagraphed's real client against a running chainproxy (simulated nodes, the
sidecar, mitmdump): the PyPI ``metagraphed`` client, used as its README shows,
through the proxy's one address; and what any client relies on, through the
proxy, in raw HTTP: x-metagraph-rpc-* on calls, ETag revalidation (304), CORS
and the error envelope on the registry paths. (Metagraphed's npm client is not
tested: the npm registry does not serve it, docs/METAGRAPHED.md.)"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.harness import Stack, http_json
from tests.e2e.helpers import build_stack, call

pytestmark = pytest.mark.e2e
metagraphed = pytest.importorskip("metagraphed", reason="pip install metagraphed==0.4.1")

# a probe waits 3 s before it calls a node timed out: one that timed out on a
# stall of a loaded machine is classified "timeout", not "live", until the next
FAST = {"probe": {"interval_s": 1, "head_interval_s": 0.5, "timeout_s": 3}}


@pytest.fixture(scope="module")
def mstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = build_stack(
        tmp_path_factory.mktemp("metagraphed"),
        ("alpha", "beta", "archive-gamma"),
        top=FAST,
        usage={"flush_s": 0.5},
    )
    yield s
    s.stop()


async def _until(pred: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        await asyncio.sleep(0.2)
    raise AssertionError("condition not met in time")


def _probed(stack: Stack) -> bool:
    doc = http_json(f"{stack.proxy_url}/api/v1/rpc/endpoints")
    return all(r["status"] == "ok" for r in doc["data"]["endpoints"])


def _raw(url: str, method: str = "GET", **headers: str) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def _python_client(base: str) -> dict[str, Any]:
    from metagraphed import MetagraphedClient, MetagraphedError, metagraphed_fetch, metagraphed_rpc

    client = MetagraphedClient(base_url=base)
    providers = client.providers()
    out: dict[str, Any] = {
        "header": client.rpc("finney", "chain_getHeader"),
        "health": client.rpc("finney", "system_health"),
        "hash": metagraphed_rpc("finney", "chain_getBlockHash", [2], base_url=base),
        "endpoints": client.endpoints(),
        "providers": providers,
        "provider": client.fetch(
            "/api/v1/providers/{slug}", path_params={"slug": providers[0].slug}
        )["data"]["provider"],
        "all": client.fetch_all("/api/v1/endpoints"),
        "pages": list(client.paginate("/api/v1/endpoints", query={"limit": 2})),
        "first": client.fetch("/api/v1/endpoints", query={"limit": 2}),
        "surfaces": client.fetch("/api/v1/health")["data"]["global"],
        "pools": [p["id"] for p in client.fetch("/api/v1/rpc/pools")["data"]["pools"]],
        "usage": client.fetch("/api/v1/rpc/usage")["data"],
        "usage_7d": metagraphed_fetch("/api/v1/rpc/usage", base_url=base, query={"window": "7d"}),
        "incidents": client.fetch("/api/v1/endpoint-incidents")["data"]["summary"],
        "downtime": MetagraphedClient(base_url=base + "/metagraphed").fetch("/api/v1/incidents"),
        "errors": {},
    }
    for name, path, query in (
        ("severity", "/api/v1/endpoint-incidents", {"severity": "apocalyptic"}),
        ("status", "/api/v1/endpoints", {"status": "sideways"}),
        ("limit", "/api/v1/endpoints", {"limit": 5000}),
        ("slug", "/api/v1/providers/nobody", None),
    ):
        try:
            client.fetch(path, query=query)
        except MetagraphedError as e:
            out["errors"][name] = (e.status, str(e))
    try:
        client.rpc("finney", "author_submitExtrinsic", ["0x00"])
    except MetagraphedError as e:
        out["refused"] = (e.status, str(e))
    return out


async def test_the_pypi_client_through_the_proxy(mstack: Stack) -> None:
    await _until(lambda: _probed(mstack), 30)
    got = await asyncio.to_thread(_python_client, mstack.proxy_url)
    assert int(got["header"]["number"], 16) > 0 and "peers" in got["health"]
    assert got["hash"].startswith("0x") and len(got["hash"]) == 66
    ids = {e["id"] for e in http_json(f"{mstack.sidecar_url}/api/v1/endpoints/callable")["rows"]}
    assert {e.surface_id for e in got["endpoints"]} == ids and len(ids) == 3
    assert {e.kind for e in got["endpoints"]} == {"subtensor-rpc"}
    assert {e.classification for e in got["endpoints"]} == {"live"}
    assert {p.name for p in got["providers"]} == {"alpha", "beta", "archive-gamma"}
    assert {p.slug for p in got["providers"]} == {"alpha", "beta", "archive-gamma"}
    paged = [r["id"] for p in got["pages"] for r in p["data"]["endpoints"]]
    assert paged == [r["id"] for r in got["all"]] and sorted(paged) == sorted(ids)
    assert [len(p["data"]["endpoints"]) for p in got["pages"]] == [2, 1]
    pagination = got["first"]["meta"]["pagination"]
    assert pagination["next_cursor"] == 2 and pagination["total"] == 3
    assert got["first"]["ok"] is True and pagination["collection"] == "endpoints"
    assert got["surfaces"]["surface_count"] == 3
    assert got["provider"]["id"] == got["providers"][0].slug
    assert "finney-rpc" in got["pools"] and "finney-archive" in got["pools"]
    assert got["usage_7d"]["ok"] is True
    # the shapes (counts, not values: usage ships in batches, incidents come and go)
    assert type(got["usage_7d"]["data"]["summary"]["total_requests"]) is int
    assert type(got["incidents"]["incident_count"]) is int
    assert got["downtime"]["ok"] is True and "surfaces" in got["downtime"]["data"]
    assert type(got["downtime"]["data"]["summary"]["incident_count"]) is int
    # Refusals raise MetagraphedError with the status and the envelope's code.
    errors = got["errors"]
    assert set(errors) == {"severity", "status", "limit", "slug"}
    for name in ("severity", "status", "limit"):
        status, text = errors[name]
        assert status == 400 and "invalid_query" in text, (name, text)
    assert "severity" in errors["severity"][1]
    assert errors["slug"][0] == 404 and "not_found" in errors["slug"][1]
    assert got["refused"][0] == 403
    # The calls made here reach the usage statistics, in Metagraphed's shape.
    usage = await _until(
        lambda: (
            (u := http_json(f"{mstack.proxy_url}/api/v1/rpc/usage")["data"])["summary"][
                "total_requests"
            ]
            >= 2
            and u
        ),
        20,
    )
    assert usage["networks"][0]["network"] == "finney" and usage["endpoints"]
    assert {e["endpoint_id"] for e in usage["endpoints"]} <= ids


def test_headers_a_client_relies_on_through_the_proxy(mstack: Stack) -> None:
    deadline = time.monotonic() + 30
    while not _probed(mstack):
        assert time.monotonic() < deadline, "the nodes were not probed"
        time.sleep(0.2)
    body = json.dumps(call("chain_getBlockHash", [1])).encode()
    req = urllib.request.Request(
        mstack.rpc_url(), data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        h = {k.lower(): v for k, v in r.headers.items()}
    assert h["x-metagraph-rpc-endpoint-id"] == h["x-chainproxy-upstream"]
    assert h["x-metagraph-rpc-endpoint-id"].startswith("endpoint-srf-")
    assert h["x-metagraph-rpc-provider"] in ("alpha", "beta", "archive-gamma")
    assert h["x-metagraph-rpc-attempts"] == "1" and h["x-metagraph-rpc-cache"] in ("hit", "miss")

    status, h, first = _raw(f"{mstack.proxy_url}/api/v1/endpoints?limit=2")
    assert status == 200 and h["access-control-allow-origin"] == "*" and h["etag"]
    assert json.loads(first)["meta"]["pagination"]["next_cursor"] == 2
    # Revalidation as a caching client does it: the weak ETag of a 200 sent back
    # in If-None-Match (alone, or in a list) gets a 304 with no body and the same
    # ETag, so the client keeps the body it has. The providers' document changes
    # only with its generated_at second: a 304 soon.
    url = f"{mstack.proxy_url}/api/v1/providers"
    for _ in range(5):
        _, h, _ = _raw(url)
        etag = h["etag"]
        single = _raw(url, **{"If-None-Match": etag})
        listed = _raw(url, **{"If-None-Match": f'"stale", {etag}'})
        if single[0] == listed[0] == 304:
            break
    assert etag.startswith('W/"')
    for status, h304, again in (single, listed):
        assert status == 304 and again == b"" and h304["etag"] == etag
    # Refusals in Metagraphed's error envelope, whatever the client.
    for path, status_, code in (
        ("/api/v1/endpoints?status=sideways", 400, "invalid_query"),
        ("/api/v1/endpoints?limit=5000", 400, "invalid_query"),
        ("/api/v1/providers/nobody", 404, "not_found"),
    ):
        status, _, err = _raw(f"{mstack.proxy_url}{path}")
        doc = json.loads(err)
        assert status == status_ and doc["error"]["code"] == code, (path, doc)
        assert doc["ok"] is False and doc["data"] is None
    status, h, _ = _raw(
        f"{mstack.proxy_url}/api/v1/endpoints", "OPTIONS",
        Origin="https://app.example", **{"Access-Control-Request-Method": "GET"},
    )  # fmt: skip
    assert status == 204 and h["access-control-allow-origin"] == "*"
    status, _, err = _raw(f"{mstack.proxy_url}/metagraphed/api/v1/nope")
    assert status == 404 and json.loads(err)["error"]["code"] == "not_found"
