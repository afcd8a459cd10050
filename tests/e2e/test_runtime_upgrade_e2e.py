"""A runtime upgrade at block N, through real processes: two simulated nodes
upgrade from spec 300 to 301 at N while clients read through chainproxy as a
validator fleet does, at every block, without a hash (the proxy pins each read
to the head, the cache and the pre-warm answer the second client and the next
blocks). Every answer is the runtime of the block it was answered for:
version, metadata and runtime API answers at blocks before N are the old
runtime's, at N and after the new one's, also when the cache answers; a
runtime version subscription is told of the new version. The sidecar sees the
upgrade once: its log line, ``chainproxy_runtime_upgrades_total`` and
``last_upgrade`` in ``/api/v1/networks/finney``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from simnode.runtime import BASE_SPEC, call_result, metadata
from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import PROXY_DEFAULTS, Client, Reply, call, next_client_ip, post, with_wss

pytestmark = pytest.mark.e2e

BLOCK_S = 2.0
NEW_SPEC = BASE_SPEC + 1
READ = ["SubnetInfoRuntimeApi_get_subnet_info", "0x0100"]  # a runtime API read
READS = (("state_getRuntimeVersion", []), ("state_getMetadata", []), ("state_call", READ))
FAST_HEADS = {"probe": {"interval_s": 30, "head_interval_s": 0.5, "timeout_s": 1}}


@pytest.fixture
def upgrade_stack(tmp_path: Any) -> Iterator[Stack]:
    s = Stack(tmp_path)
    try:
        epoch = time.time() - 600
        s.start_nodes(("alpha", "beta"), epoch=epoch, block_time=BLOCK_S)
        config = with_wss(base_config(tmp_path, s.nodes, top=FAST_HEADS, **PROXY_DEFAULTS))
        s.write_config(config)
        s.start_sidecar()
        s.start_proxy()
        yield s
    finally:
        s.stop()


def expected(method: str, spec: int) -> Any:
    if method == "state_getMetadata":
        return metadata(spec)
    if method == "state_call":
        return call_result(*READ, spec)
    return spec  # state_getRuntimeVersion: its specVersion


def answered(method: str, reply: Reply) -> Any:
    assert reply.status == 200 and "result" in reply.body, (method, reply.body)
    result = reply.body["result"]
    return result["specVersion"] if method == "state_getRuntimeVersion" else result


async def network(stack: Stack) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"{stack.proxy_url}/api/v1/networks/finney") as r,
    ):
        assert r.status == 200
        return await r.json()


async def until(what: str, check: Any, timeout: float = 15.0) -> Any:
    """Poll ``check()`` (async) until it returns something truthy, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def test_answers_follow_the_runtime_of_their_block_across_an_upgrade(
    upgrade_stack: Stack,
) -> None:
    stack = upgrade_stack
    alpha = stack.nodes[0]

    async def runtime_seen() -> Any:
        return (await network(stack))["runtime"]

    assert (await until("the sidecar to read the runtime", runtime_seen))[
        "spec_version"
    ] == BASE_SPEC
    best = int(alpha.rpc("chain_getHeader")["result"]["number"], 16)
    upgrade_at = best + 4  # three blocks of reads before it, three after
    for node in stack.nodes:
        node.control(upgrade_at=upgrade_at, upgrade_spec=NEW_SPEC)
    ips = [next_client_ip() for _ in range(2)]
    numbers: dict[str, int] = {}  # block hash -> number, asked of a node

    def number_of(block_hash: str) -> int:
        if block_hash not in numbers:
            header = alpha.rpc("chain_getHeader", [block_hash])["result"]
            numbers[block_hash] = int(header["number"], 16)
        return numbers[block_hash]

    pinned: dict[bool, set[str]] = {False: set(), True: set()}  # after the upgrade -> hashes
    served_from_cache_after = 0
    ws = stack.rpc_url().replace("http://", "ws://")
    async with aiohttp.ClientSession() as s, s.ws_connect(ws) as sock:
        client = Client(sock)
        heads = (await client.ask("chain_subscribeNewHeads"))["result"]
        versions = (await client.ask("state_subscribeRuntimeVersion"))["result"]
        first = (await client.wait_notes(versions, 1))[0]
        assert first["specVersion"] == BASE_SPEC
        head = 0
        while head < upgrade_at + 2:
            seen = len(await client.wait_notes(heads, 1))
            await client.wait_notes(heads, seen + 1, timeout=6 * BLOCK_S)
            head = int(client.notes[heads][-1]["number"], 16)
            for ip in ips:  # two clients, one after the other, at each block
                for method, params in READS:
                    r = await post(stack.rpc_url(), call(method, params), client_ip=ip)
                    got = answered(method, r)
                    at = r.headers.get("X-Chainproxy-Pinned", "")
                    if not at.startswith("0x"):  # not pinned: the node's best of that moment
                        assert got in (expected(method, BASE_SPEC), expected(method, NEW_SPEC))
                        continue
                    after = number_of(at) >= upgrade_at
                    assert got == expected(method, NEW_SPEC if after else BASE_SPEC), (
                        method,
                        number_of(at),
                        upgrade_at,
                        r.headers.get("X-Cache"),
                    )
                    pinned[after].add(at)
                    if after and r.headers.get("X-Cache") == "HIT":
                        served_from_cache_after += 1
        notes = await client.wait_notes(versions, 2, timeout=4 * BLOCK_S)
        assert [n["specVersion"] for n in notes] == [BASE_SPEC, NEW_SPEC]
    assert pinned[False] and pinned[True], pinned  # reads were pinned on both sides
    assert served_from_cache_after > 0  # the cache answered reads after the upgrade too

    # By hash, once more each: every answer now comes from the cache, and is
    # still its own block's runtime.
    for after, hashes in pinned.items():
        for block_hash in sorted(hashes)[:2]:
            for method, params in READS:
                r = await post(stack.rpc_url(), call(method, [*params, block_hash]))
                assert answered(method, r) == expected(method, NEW_SPEC if after else BASE_SPEC)
                assert r.headers["X-Cache"] == "HIT", (method, number_of(block_hash))

    # The sidecar saw it once.
    async def upgrade_seen() -> Any:
        return (await network(stack))["last_upgrade"]

    upgrade = await until("the sidecar to see the upgrade", upgrade_seen, timeout=10)
    assert (upgrade["from"]["spec_version"], upgrade["to"]["spec_version"]) == (BASE_SPEC, NEW_SPEC)
    assert upgrade["after_block"] < upgrade_at <= upgrade["block"], (upgrade, upgrade_at)
    doc = await network(stack)
    assert doc["runtime"]["spec_version"] == NEW_SPEC
    async with aiohttp.ClientSession() as s, s.get(f"{stack.sidecar_url}/metrics") as r:
        metrics = await r.text()
    assert 'chainproxy_runtime_upgrades_total{network="finney"} 1.0' in metrics
    assert f'chainproxy_runtime_spec_version{{network="finney"}} {NEW_SPEC}.0' in metrics
    async with aiohttp.ClientSession() as s, s.get(f"{stack.proxy_url}/?network=finney") as r:
        page = await r.text()
    assert f"finney: runtime node-subtensor {NEW_SPEC} · upgraded from {BASE_SPEC}" in page
    log = (stack.tmp / "sidecar.log").read_text()
    line = f"finney: runtime upgrade {BASE_SPEC} -> {NEW_SPEC} at block {upgrade['block']}"
    assert log.count("runtime upgrade") == 1 and line in log
