"""Metagraphed's real clients against a running chainproxy (simulated nodes, the
sidecar, mitmdump): the PyPI ``metagraphed`` client and the npm
``@jsonbored/metagraphed`` client (vendored, tests/clients/js/metagraphed), used
as their READMEs show, through the proxy's one address; and the headers a
client relies on, through the proxy: x-metagraph-rpc-* on calls, ETag/304 and
CORS on the registry paths."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.harness import REPO, Stack, http_json
from tests.e2e.helpers import build_stack, call

pytestmark = pytest.mark.e2e
metagraphed = pytest.importorskip("metagraphed", reason="pip install metagraphed==0.4.1")

FAST = {"probe": {"interval_s": 1, "head_interval_s": 0.5, "timeout_s": 1}}
JS_SESSION = REPO / "tests" / "clients" / "js" / "metagraphed_session.mjs"


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
    from metagraphed import MetagraphedClient, MetagraphedError

    client = MetagraphedClient(base_url=base)
    out: dict[str, Any] = {
        "header": client.rpc("finney", "chain_getHeader"),
        "health": client.rpc("finney", "system_health"),
        "endpoints": client.endpoints(),
        "providers": client.providers(),
        "all": client.fetch_all("/api/v1/endpoints"),
        "pages": list(client.paginate("/api/v1/endpoints", query={"limit": 2})),
        "usage": client.fetch("/api/v1/rpc/usage")["data"],
        "downtime": MetagraphedClient(base_url=base + "/metagraphed").fetch("/api/v1/incidents"),
    }
    try:
        client.fetch("/api/v1/endpoint-incidents", query={"severity": "apocalyptic"})
    except MetagraphedError as e:
        out["error"] = (e.status, str(e))
    try:
        client.rpc("finney", "author_submitExtrinsic", ["0x00"])
    except MetagraphedError as e:
        out["refused"] = (e.status, str(e))
    return out


async def test_the_pypi_client_through_the_proxy(mstack: Stack) -> None:
    await _until(lambda: _probed(mstack), 30)
    got = await asyncio.to_thread(_python_client, mstack.proxy_url)
    assert int(got["header"]["number"], 16) > 0 and "peers" in got["health"]
    ids = {e["id"] for e in http_json(f"{mstack.sidecar_url}/api/v1/endpoints/callable")["rows"]}
    assert {e.surface_id for e in got["endpoints"]} == ids and len(ids) == 3
    assert {e.kind for e in got["endpoints"]} == {"subtensor-rpc"}
    assert {e.classification for e in got["endpoints"]} == {"live"}
    assert {p.name for p in got["providers"]} == {"alpha", "beta", "archive-gamma"}
    assert {p.slug for p in got["providers"]} == {"alpha", "beta", "archive-gamma"}
    paged = [r["id"] for p in got["pages"] for r in p["data"]["endpoints"]]
    assert paged == [r["id"] for r in got["all"]] and sorted(paged) == sorted(ids)
    assert [len(p["data"]["endpoints"]) for p in got["pages"]] == [2, 1]
    assert got["downtime"]["ok"] is True and "surfaces" in got["downtime"]["data"]
    status, text = got["error"]
    assert status == 400 and "invalid_query" in text and "severity" in text
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
    # The providers' document changes only with its generated_at second: a 304 soon.
    url = f"{mstack.proxy_url}/api/v1/providers"
    for _ in range(5):
        status, h, _ = _raw(url)
        status, _, again = _raw(url, **{"If-None-Match": h["etag"]})
        if status == 304:
            break
    assert status == 304 and again == b""
    status, h, _ = _raw(
        f"{mstack.proxy_url}/api/v1/endpoints", "OPTIONS",
        Origin="https://app.example", **{"Access-Control-Request-Method": "GET"},
    )  # fmt: skip
    assert status == 204 and h["access-control-allow-origin"] == "*"
    status, _, err = _raw(f"{mstack.proxy_url}/metagraphed/api/v1/nope")
    assert status == 404 and json.loads(err)["error"]["code"] == "not_found"


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js 18+ is needed for the npm client")
async def test_the_npm_client_through_the_proxy(mstack: Stack) -> None:
    await _until(lambda: _probed(mstack), 30)
    done = await asyncio.to_thread(
        subprocess.run,
        ["node", str(JS_SESSION), mstack.proxy_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["health"]["surface_count"] == 3
    assert len(out["endpoints"]["data"]["endpoints"]) == 2
    assert out["endpoints"]["meta"]["pagination"]["next_cursor"] == 2
    assert sorted(out["all"]) == sorted(i for page in out["pages"] for i in page)
    assert len(out["all"]) == 3 and [len(p) for p in out["pages"]] == [2, 1]
    assert {p["name"] for p in out["providers"]} == {"alpha", "beta", "archive-gamma"}
    assert out["provider"]["id"] == out["providers"][0]["id"]
    assert "finney-rpc" in out["pools"] and "finney-archive" in out["pools"]
    assert out["usage"]["total_requests"] >= 0 and "incident_count" in out["incidents"]
    assert out["downtime"]["incident_count"] >= 0
    assert int(out["head"]["number"], 16) > 0 and out["hash"].startswith("0x")
    # The client revalidated with If-None-Match and served its cached body on the 304.
    assert out["etag"]["statuses"][-1] == 304 and out["etag"]["same"] is True
    assert out["errors"]["status"] == {"status": 400, "code": "invalid_query", "ok": False}
    assert out["errors"]["limit"] == {"status": 400, "code": "invalid_query", "ok": False}
    assert out["errors"]["slug"] == {"status": 404, "code": "not_found", "ok": False}
    assert out["errors"]["rpc"]["name"] == "MetagraphedError"
    assert out["errors"]["rpc"]["status"] == 403
