"""The wire contract (status, headers and JSON-RPC body of every kind of
call and refusal), row by row, over real HTTP through
mitmdump + addon to simulated nodes."""

from __future__ import annotations

import pytest

from tests.e2e.harness import Stack
from tests.e2e.helpers import call, next_client_ip, post

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(mode_stack: Stack) -> Stack:
    """Every test here runs under each dispatch mode (default, lean, mitmproxy's)."""
    return mode_stack


async def test_cached_later_methods_answer_like_the_node(stack: Stack) -> None:
    node = stack.nodes[0]
    url = stack.rpc_url()
    head = (await post(url, call("chain_getHeader"))).body["result"]
    n = int(head["number"], 16) - 5
    expected_hash = node.rpc("chain_getBlockHash", [n])["result"]

    r = await post(url, call("chain_getBlockHash", [n]))
    assert r.status == 200 and r.body["result"] == expected_hash
    assert r.headers["X-Cache"] == "MISS"
    assert r.headers["Content-Type"].startswith("application/json")

    r = await post(url, call("chain_getBlock", [expected_hash]))
    assert r.body["result"]["block"]["header"]["number"] == hex(n)

    r = await post(url, call("chain_getHeader", [expected_hash]))
    assert r.body["result"] == node.rpc("chain_getHeader", [expected_hash])["result"]
    assert int(head["number"], 16) > 0


@pytest.mark.parametrize("id_", [7, 0, -3, 2**53 + 1, 1.5, "abc", "", "ünïcode-✓", None])
async def test_id_is_echoed_exactly(stack: Stack, id_: object) -> None:
    r = await post(stack.rpc_url(), call("system_health", id_=id_))
    assert r.status == 200
    assert r.body["id"] == id_ and type(r.body["id"]) is type(id_)
    assert r.body["result"]["isSyncing"] is False


async def test_batch_mixes_allowed_refused_and_junk_in_request_order(stack: Stack) -> None:
    batch = [
        call("system_chain", id_="a"),
        call("author_submitExtrinsic", ["0x00"], id_="b"),
        {"jsonrpc": "2.0", "id": "c"},  # no method
        call("chain_getBlockHash", [1], id_="d"),
        call("chain_subscribeNewHeads", id_="e"),
        call("system_chain", id_="a"),  # duplicate id is answered twice
    ]
    before = sum(n.state()["calls"].get("author_submitExtrinsic", 0) for n in stack.nodes)
    r = await post(stack.rpc_url(), batch)
    assert r.status == 200
    assert [x["id"] for x in r.body] == ["a", "b", "c", "d", "e", "a"]
    assert r.body[0]["result"] == "Bittensor" and r.body[5]["result"] == "Bittensor"
    assert r.body[1]["error"]["code"] == -32601
    assert r.body[1]["error"]["data"]["policy"] == "allowlist"
    assert r.body[2]["error"]["code"] == -32600
    assert r.body[3]["result"].startswith("0x")
    assert "subscription" in r.body[4]["error"]["data"]["reason"]
    after = sum(n.state()["calls"].get("author_submitExtrinsic", 0) for n in stack.nodes)
    assert after == before, "a write reached an upstream"


async def test_not_json_is_400_parse_error(stack: Stack) -> None:
    r = await post(stack.rpc_url(), b"{not json")
    assert (r.status, r.body["error"]["code"], r.body["id"]) == (400, -32700, None)
    assert r.body["jsonrpc"] == "2.0"


@pytest.mark.parametrize(
    "body",
    [
        {"jsonrpc": "1.0", "id": 3, "method": "system_health"},
        {"id": 3, "method": "system_health"},
        {"jsonrpc": "2.0", "id": 3, "method": 5},
        {"jsonrpc": "2.0", "id": 3, "method": "system_health", "params": "x"},
        [],
        "just a string",
    ],
)
async def test_invalid_request_is_400(stack: Stack, body: object) -> None:
    r = await post(stack.rpc_url(), body)
    assert r.status == 400 and r.body["error"]["code"] == -32600


async def test_invalid_request_echoes_readable_id(stack: Stack) -> None:
    r = await post(stack.rpc_url(), {"jsonrpc": "2.0", "id": 42, "method": ""})
    assert r.status == 400 and r.body["id"] == 42


async def test_body_too_large_is_413_naming_the_limit(stack: Stack) -> None:
    big = call("state_getStorage", ["0x" + "ab" * 600_000])
    r = await post(stack.rpc_url(), big)
    assert r.status == 413 and r.body["error"]["code"] == -32600
    assert "1048576" in r.body["error"]["message"]


async def test_batch_too_large_is_413_naming_the_limit(stack: Stack) -> None:
    r = await post(stack.rpc_url(), [call("system_health", id_=i) for i in range(101)])
    assert r.status == 413 and r.body["error"]["code"] == -32600
    assert "100" in r.body["error"]["message"]


async def test_method_not_on_allowlist_is_403(stack: Stack) -> None:
    r = await post(stack.rpc_url(), call("author_submitExtrinsic", ["0x00"], id_=9))
    assert r.status == 403 and r.body["id"] == 9
    err = r.body["error"]
    assert err["code"] == -32601
    assert err["data"]["policy"] == "allowlist" and "read-only" in err["data"]["reason"]
    assert all(n.state()["calls"].get("author_submitExtrinsic", 0) == 0 for n in stack.nodes)


async def test_101st_request_in_the_window_is_429(stack: Stack) -> None:
    ip = next_client_ip()
    for i in range(100):
        r = await post(stack.rpc_url(), call("system_health", id_=i), client_ip=ip)
        assert r.status == 200, (i, r.body)
        assert int(r.headers["X-RateLimit-Remaining"]) == 99 - i
    r = await post(stack.rpc_url(), call("system_health", id_="over"), client_ip=ip)
    assert r.status == 429
    err = r.body["error"]
    assert r.body["id"] == "over" and err["code"] == -32005
    assert err["data"]["policy"] == "100;w=60"
    assert err["data"]["reason"]
    retry = int(r.headers["Retry-After"])
    assert 1 <= retry <= 60 and err["data"]["retry_after"] == retry
    assert r.headers["X-RateLimit-Limit"] == "100"
    assert r.headers["X-RateLimit-Remaining"] == "0"
    assert r.headers["X-RateLimit-Policy"] == "100;w=60"
    assert 0 < int(r.headers["X-RateLimit-Reset"]) <= 60
    # Another client is not affected.
    assert (await post(stack.rpc_url(), call("system_health"))).status == 200


async def test_batch_calls_count_each_and_over_limit_batch_is_refused_whole(stack: Stack) -> None:
    ip = next_client_ip()
    r = await post(stack.rpc_url(), [call("system_health", id_=i) for i in range(60)], client_ip=ip)
    assert r.status == 200 and r.headers["X-RateLimit-Remaining"] == "40"
    r = await post(stack.rpc_url(), [call("system_health", id_=i) for i in range(41)], client_ip=ip)
    assert r.status == 429 and isinstance(r.body, dict) and r.body["id"] is None
    r = await post(stack.rpc_url(), [call("system_health", id_=i) for i in range(40)], client_ip=ip)
    assert r.status == 200 and len(r.body) == 40


@pytest.mark.parametrize("path", ["/rpc/v1/nosuchnet", "/rpc/v2/finney", "/rpc", "/rpc/v1"])
async def test_unknown_network_or_version_is_404(stack: Stack, path: str) -> None:
    r = await post(stack.proxy_url + path, call("system_health", id_=5))
    assert r.status == 404 and r.body["error"]["code"] == -32601


async def test_wrong_http_method_is_405_with_allow_post(stack: Stack) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async with s.get(stack.rpc_url()) as r:
            body = await r.json()
            assert r.status == 405 and r.headers["Allow"] == "POST"
            assert body["error"]["code"] == -32600
            assert "WebSocket upgrade" in body["error"]["message"]  # a handshake gone wrong
        async with s.options(stack.rpc_url()) as r:
            assert r.status == 204 and r.headers["Access-Control-Allow-Origin"] == "*"


async def test_every_answer_has_a_request_id_and_browsers_may_read_the_contracts_headers(
    stack: Stack,
) -> None:
    """The proxy's own answers (its health, the CORS preflight) carry
    ``X-Request-Id`` as every call's answer does, and a browser page is
    allowed to read every header of USING's table."""
    import aiohttp

    sent = {"X-Request-Id": "mine-42"}
    async with aiohttp.ClientSession() as s:
        for method, url in (
            ("GET", f"{stack.proxy_url}/rpc/healthz"),
            ("HEAD", f"{stack.proxy_url}/rpc/healthz"),
            ("OPTIONS", stack.rpc_url()),
        ):
            async with s.request(method, url) as r:
                assert r.status in (200, 204) and len(r.headers["X-Request-Id"]) >= 8, method
            async with s.request(method, url, headers=sent) as r:
                assert r.headers["X-Request-Id"] == "mine-42", method
        async with s.post(stack.rpc_url(), json=call("system_health")) as r:
            exposed = {
                h.strip().lower() for h in r.headers["Access-Control-Expose-Headers"].split(",")
            }
    contract = {
        "X-Cache", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
        "X-RateLimit-Policy", "Retry-After", "X-Chainproxy-Upstream", "X-Chainproxy-Attempts",
        "X-Chainproxy-Pinned", "X-Chainproxy-Coalesced", "X-Chainproxy-Hedged", "X-Request-Id",
    }  # fmt: skip
    assert {h.lower() for h in contract} <= exposed, sorted({h.lower() for h in contract} - exposed)


async def test_network_without_upstreams_is_503(stack: Stack) -> None:
    r = await post(stack.rpc_url("test"), call("system_health", id_="t"))
    assert r.status == 503 and r.body["error"]["code"] == -32603 and r.body["id"] == "t"


async def test_upstream_deterministic_error_passes_through_once(stack: Stack) -> None:
    before = [n.state()["calls"].get("chain_getBlockHash", 0) for n in stack.nodes]
    r = await post(stack.rpc_url(), call("chain_getBlockHash", [{"bad": "param"}], id_="ip"))
    assert r.status == 200 and r.body["id"] == "ip"
    assert r.body["error"]["code"] == -32602
    after = [n.state()["calls"].get("chain_getBlockHash", 0) for n in stack.nodes]
    assert sum(after) - sum(before) == 1, "a deterministic error must not be retried"


async def test_all_attempts_failed_is_502_with_attempts(stack: Stack) -> None:
    for node in stack.nodes:
        node.control(http_status=503)
    r = await post(stack.rpc_url(), call("system_health", id_="x"))
    assert r.status == 502 and r.body["id"] == "x"
    err = r.body["error"]
    assert err["code"] == -32603
    attempts = err["data"]["attempts"]
    assert len(attempts) == 3
    assert {a["endpoint"] for a in attempts} == {e["id"] for e in _endpoints(stack)}
    assert all(a["reason"] == "http-503" for a in attempts)


async def test_deadline_passed_is_504(stack: Stack) -> None:
    for node in stack.nodes:
        node.control(hang=True)
    r = await post(stack.rpc_url(), call("system_health", id_="slow"))
    assert r.status == 504 and r.body["error"]["code"] == -32603 and r.body["id"] == "slow"
    assert all(a["reason"] == "timeout" for a in r.body["error"]["data"]["attempts"])
    # what happened, both limits named (every attempt timed out before the deadline did)
    message = r.body["error"]["message"]
    assert "timed out" in message and "attempt_timeout_s" in message and "deadline_s" in message


async def test_failed_batch_puts_errors_inside_a_200(stack: Stack) -> None:
    for node in stack.nodes:
        node.control(http_status=500)
    r = await post(stack.rpc_url(), [call("system_health", id_=1), call("rpc_nope", id_=2)])
    assert r.status == 200
    assert r.body[0]["error"]["code"] == -32603 and r.body[0]["error"]["data"]["attempts"]
    assert r.body[1]["error"]["code"] == -32601


def _endpoints(stack: Stack) -> list[dict[str, str]]:
    from common.endpoint_id import endpoint_id

    return [{"id": endpoint_id(n.url)} for n in stack.nodes]


async def test_spoofed_forwarded_for_from_untrusted_peer_is_ignored(stack: Stack) -> None:
    ip = next_client_ip()
    for i in range(100):
        xff = {"X-Forwarded-For": f"10.9.{i // 250}.{i % 250}"}
        r = await post(stack.rpc_url(), call("system_health", id_=i), client_ip=ip, headers=xff)
        assert r.status == 200
    r = await post(
        stack.rpc_url(),
        call("system_health"),
        client_ip=ip,
        headers={"X-Forwarded-For": "10.200.0.1"},
    )
    assert r.status == 429, "X-Forwarded-For from an untrusted peer changed the identity"


async def test_dispatch_mode_is_in_effect(stack: Stack, request: pytest.FixtureRequest) -> None:
    """Lean mode really unloads the unused built-ins (and says which); the others don't."""
    mode = request.node.callspec.params["mode_stack"]
    assert stack.proxy is not None
    log = stack.proxy.output()
    if mode == "lean":
        assert "chainproxy lean mode: " in log
        assert "built-in addons unloaded" in log and "anticache" in log
    else:
        assert "lean mode" not in log
    ok = await post(stack.rpc_url(), call("system_health"), client_ip=next_client_ip())
    assert ok.status == 200 and "result" in ok.body
