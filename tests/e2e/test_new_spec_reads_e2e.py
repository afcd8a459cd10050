"""The new spec's stateless reads through the real mitmdump + addon to
simulated nodes: every archive_v1 and chainSpec_v1 method over HTTP and over
WebSocket (archive_v1_storage as a subscription, refused over HTTP), checked
against what the nodes themselves answer; a second identical archive read
answered with no upstream call (counted at the nodes); rpc_methods per
transport, none of it refused; and a node stopped in the middle of reads
with no client error. Everything on 127.0.0.1, every wait bounded."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import Node, Stack, base_config
from tests.e2e.helpers import (
    PROXY_DEFAULTS,
    Client,
    call,
    next_client_ip,
    post,
    wait_until,
    with_wss,
)

pytestmark = pytest.mark.e2e

PREFIX = "0x658faa385070e074c85bf6b568cf0555"  # the simnode answers 64 keys under any prefix
LEGACY_READS = frozenset(
    {
        "chain_getHeader",
        "chain_getBlock",
        "chain_getBlockHash",
        "state_call",
        "state_queryStorageAt",
        "state_getKeysPaged",
    }
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("newspec")
    s = Stack(tmp)
    epoch = time.time() - 600
    try:
        for name in ("alpha", "beta", "archive-gamma"):
            s.start_node(name, epoch=epoch, archive=name.startswith("archive"))
        config = base_config(
            tmp,
            s.nodes,
            top={"probe": {"interval_s": 2, "head_interval_s": 1, "timeout_s": 2}},
            **PROXY_DEFAULTS,
            rate_limit={"requests": 100_000, "window_s": 60},
            cross_check={"sample_rate": 0},  # no second node asked behind the test's back
            prewarm={"max_reads": 0},
            hedge={"enabled": False},
        )
        s.write_config(with_wss(config))
        s.start_sidecar()
        s.start_proxy()
    except BaseException:
        s.stop()
        raise
    yield s
    s.stop()


class Http:
    """Calls over POST, each from a fresh client address."""

    def __init__(self, stack: Stack) -> None:
        self.url = stack.rpc_url()

    async def ask(self, method: str, params: Any = None) -> Any:
        r = await post(self.url, call(method, params))
        assert r.status == 200, (method, r.status, r.body)
        return r.body


@asynccontextmanager
async def socket(stack: Stack) -> AsyncIterator[Client]:
    url = stack.rpc_url().replace("http://", "ws://")
    connector = aiohttp.TCPConnector(local_addr=(next_client_ip(), 0))
    async with aiohttp.ClientSession(connector=connector) as s:
        async with s.ws_connect(url, timeout=aiohttp.ClientWSTimeout(10)) as ws:
            c = Client(ws)
            yield c
            c._reader.cancel()


def _blake2(data: bytes) -> str:
    return "0x" + hashlib.blake2b(data, digest_size=32).hexdigest()


async def _storage(c: Client, params: list[Any]) -> list[dict[str, Any]]:
    """An archive_v1_storage operation to its end: its events."""
    answer = await c.ask("archive_v1_storage", params)
    op_id = answer["result"]
    assert isinstance(op_id, str), answer
    await wait_until(
        lambda: c.notes.get(op_id, [{}])[-1].get("event") in ("storageDone", "storageError"),
        10,
        "the storage operation ended",
        step=0.02,
    )
    assert c.methods[op_id] == "archive_v1_storageEvent"
    return c.notes[op_id]


def _proxied(nodes: list[Node], since: float) -> list[dict[str, Any]]:
    """What the proxy sent the nodes since ``since``, of the legacy reads."""
    return [
        a
        for n in nodes
        if n.proc.alive()
        for a in n.arrivals(since)
        if a["agent"] == "chainproxy" and LEGACY_READS & set(a["methods"])
    ]


async def test_every_read_over_http_and_websocket(stack: Stack) -> None:
    node = stack.nodes[0]
    finalized = int(
        node.rpc("chain_getHeader", [node.rpc("chain_getFinalizedHead")["result"]])["result"][
            "number"
        ],
        16,
    )
    height = finalized - 20
    at = node.rpc("chain_getBlockHash", [height])["result"]
    genesis = node.rpc("chain_getBlockHash", [0])["result"]
    block = node.rpc("chain_getBlock", [at])["result"]["block"]
    value = node.rpc("state_call", ["Core_version", "0x", at])["result"]
    keys = node.rpc("state_getKeysPaged", [PREFIX, 1000, None, at])["result"]
    unknown = "0x" + "ee" * 32
    async with socket(stack) as ws:
        for transport, ask in (("http", Http(stack).ask), ("ws", ws.ask)):
            name = (await ask("chainSpec_v1_chainName"))["result"]
            assert name == node.rpc("system_chain")["result"], transport
            props = (await ask("chainSpec_v1_properties"))["result"]
            assert props == node.rpc("system_properties")["result"]
            assert (await ask("chainSpec_v1_genesisHash"))["result"] == genesis
            assert (await ask("archive_v1_genesisHash"))["result"] == genesis
            got = (await ask("archive_v1_finalizedHeight"))["result"]
            # the least of the nodes' as the sidecar last probed them: a block
            # or two behind what a node says now, never past the finalized
            assert isinstance(got, int) and finalized - 3 <= got <= finalized + 10
            assert (await ask("archive_v1_hashByHeight", [height]))["result"] == [at]
            header = (await ask("archive_v1_header", [at]))["result"]
            assert _blake2(bytes.fromhex(header[2:])) == at  # the SCALE header hashes to it
            assert (await ask("archive_v1_body", [at]))["result"] == block["extrinsics"]
            assert (await ask("archive_v1_call", [at, "Core_version", "0x"]))["result"] == {
                "success": True,
                "value": value,
            }
            for method, params in (
                ("archive_v1_header", [unknown]),
                ("archive_v1_body", [unknown]),
                ("archive_v1_call", [unknown, "Core_version", "0x"]),
            ):
                assert (await ask(method, params))["result"] is None, (transport, method)
        # archive_v1_storage is a subscription: refused over HTTP with the way to go
        for method, params in (("archive_v1_storage", [at, []]), ("archive_v1_stopStorage", ["x"])):
            r = await post(stack.rpc_url(), call(method, params))
            assert r.status == 403 and "subscription" in r.body["error"]["data"]["reason"]
        items = [
            {"key": keys[0], "type": "value"},
            {"key": keys[1], "type": "hash"},
            {"key": "0x00aa", "type": "value"},  # the simnode has nothing at 0x00…
            {"key": PREFIX, "type": "descendantsValues"},
        ]
        events = await _storage(ws, [at, items, None])
        assert events[-1] == {"event": "storageDone"}
        found = events[:-1]
        value_0 = node.rpc("state_getStorage", [keys[0], at])["result"]
        value_1 = node.rpc("state_getStorage", [keys[1], at])["result"]
        assert found[0] == {"event": "storage", "key": keys[0], "value": value_0}
        assert found[1] == {
            "event": "storage",
            "key": keys[1],
            "hash": _blake2(bytes.fromhex(value_1[2:])),
        }
        assert [e["key"] for e in found[2:]] == keys and len(keys) == 64
        assert all(e["value"].startswith("0x") for e in found[2:])
        # a child trie: read with the childstate_* calls, each event naming it
        prefixed = "0x" + b":child_storage:default:".hex() + "c0de"
        child_keys = node.rpc("childstate_getKeysPaged", [prefixed, PREFIX, 1000, None, at])[
            "result"
        ]
        child_values = node.rpc("childstate_getStorageEntries", [prefixed, child_keys, at])[
            "result"
        ]
        items = [{"key": PREFIX, "type": "descendantsValues"}]
        events = await _storage(ws, [at, items, "0xc0de"])
        assert events[:-1] == [
            {"event": "storage", "key": k, "value": v, "childTrieKey": "0xc0de"}
            for k, v in zip(child_keys, child_values, strict=True)
        ]
        assert events[-1] == {"event": "storageDone"} and len(child_keys) == 64
        stop = await ws.ask("archive_v1_stopStorage", ["no-such-operation"])
        assert stop["result"] is None and "error" not in stop


async def test_a_second_identical_archive_read_makes_no_upstream_call(stack: Stack) -> None:
    node = stack.nodes[1]
    best = int(node.rpc("chain_getHeader")["result"]["number"], 16)
    height = best - 40  # a block no other test reads
    at = node.rpc("chain_getBlockHash", [height])["result"]
    http = Http(stack)

    async def heights_cached() -> bool:
        # block hashes are cached once the proxy knows finality (from the sidecar)
        await http.ask("archive_v1_hashByHeight", [best - 45])
        since = time.time()
        await http.ask("archive_v1_hashByHeight", [best - 45])
        return not _proxied(stack.nodes, since)

    await wait_until(heights_cached, 20, "the proxy caches block hashes below finality")
    reads: list[tuple[str, list[Any]]] = [
        ("archive_v1_hashByHeight", [height]),
        ("archive_v1_header", [at]),
        ("archive_v1_body", [at]),
        ("archive_v1_call", [at, "Core_version", "0x"]),
        ("archive_v1_genesisHash", []),
    ]
    items = [{"key": PREFIX + "01", "type": "value"}, {"key": PREFIX, "type": "descendantsHashes"}]
    async with socket(stack) as ws:
        first_at = time.time()
        first = [await http.ask(m, p) for m, p in reads]
        first_events = await _storage(ws, [at, items, None])
        sent = {m for a in _proxied(stack.nodes, first_at) for m in a["methods"]}
        # the first time the nodes were asked (else the check below proves nothing)
        want = {"chain_getBlockHash", "chain_getHeader", "chain_getBlock", "state_call"}
        assert want | {"state_queryStorageAt", "state_getKeysPaged"} <= sent
        assert len(first_events) == 66 and first_events[-1] == {"event": "storageDone"}
        again_at = time.time()
        assert [await http.ask(m, p) for m, p in reads] == first
        assert await _storage(ws, [at, items, None]) == first_events
    assert _proxied(stack.nodes, again_at) == []


def _allowlist_refused(answer: dict[str, Any]) -> bool:
    error = answer.get("error")
    data = error.get("data") if isinstance(error, dict) else None
    return isinstance(data, dict) and data.get("policy") == "allowlist"


async def test_rpc_methods_lists_per_transport_by_whole_groups(stack: Stack) -> None:
    http = (await Http(stack).ask("rpc_methods"))["result"]["methods"]
    assert "chainSpec_v1_chainName" in http and "archive_v1_header" in http
    assert not [m for m in http if m.startswith("chainHead_")]  # none of it served here
    # the archive_v1 group whole (the spec: a group is all or nothing), its
    # subscriptions refused over HTTP with the reason: they need a WebSocket
    subs = {"archive_v1_storage", "archive_v1_stopStorage"}
    subs |= {"archive_v1_storageDiff", "archive_v1_stopStorageDiff"}
    assert subs <= set(http)
    r = await post(stack.rpc_url(), [call(m, [], id_=i) for i, m in enumerate(http)])
    assert r.status == 200 and len(r.body) == len(http)
    refused = {http[d["id"]]: d for d in r.body if _allowlist_refused(d)}
    assert set(refused) == subs
    assert all("WebSocket" in str(d["error"]["data"]) for d in refused.values()), refused
    async with socket(stack) as ws:
        listed = (await ws.ask("rpc_methods"))["result"]["methods"]
        want = {"archive_v1_storage", "chainHead_v1_follow", "chain_subscribeNewHeads"}
        assert want <= set(listed)
        # every method listed is let through, whatever it answers to empty params
        # (chainHead_v1_* is the follows' own: their calls need a follow first)
        plain = [m for m in listed if not m.startswith("chainHead_")]
        for n in range(0, len(plain), 50):
            await ws.ws.send_json(
                [call(m, [], id_=f"m{n + i}") for i, m in enumerate(plain[n : n + 50])]
            )
        ids = [f"m{i}" for i in range(len(plain))]
        await wait_until(
            lambda: all(i in ws.answers for i in ids), 10, "every listed call answered"
        )
        assert [plain[n] for n, i in enumerate(ids) if _allowlist_refused(ws.answers[i])] == []
    for methods in (http, listed):
        assert not [m for m in methods if m.lower().startswith(("author_", "transaction"))]


async def test_a_node_stopped_mid_reads_costs_no_client_error(stack: Stack) -> None:
    node = stack.nodes[1]
    best = int(node.rpc("chain_getHeader")["result"]["number"], 16)
    hashes = [node.rpc("chain_getBlockHash", [best - 200 + i])["result"] for i in range(120)]
    http = Http(stack)
    answers: list[Any] = []
    start = time.time()
    stopped: list[tuple[Node, float]] = []

    async def reader(chunk: list[str]) -> None:
        for h in chunk:
            header = await http.ask("archive_v1_header", [h])
            called = await http.ask("archive_v1_call", [h, "Core_version", "0x"])
            answers.extend([header, called])

    def serving() -> Node | None:
        """A node the reads go to (the one routing prefers is not known beforehand)."""
        return next((n for n in stack.nodes if len(_proxied([n], start)) >= 3), None)

    async def stop_victim() -> None:
        victim = await wait_until(serving, 10, "a node served some reads")
        victim.proc.stop()
        stopped.append((victim, time.time()))

    try:
        await asyncio.gather(*(reader(hashes[i::6]) for i in range(6)), stop_victim())
        (victim, at), others = stopped[0], [n for n in stack.nodes if n is not stopped[0][0]]
        assert not victim.proc.alive()
        errors = [a for a in answers if "error" in a or a.get("result") is None]
        assert errors == [] and len(answers) == 240
        assert all(a["result"]["success"] for a in answers[1::2])
        assert _proxied(others, at), "reads went on after the node stopped"
    finally:
        for victim, _ in stopped:  # the module's other tests have their three nodes
            stack.restart_node(victim)
