"""The new_spec_reads step in the pipeline, over a fake legacy caller: the
archive_v1 and chainSpec_v1 reads over HTTP (shapes, null for an unknown
block, a node's error kept, a batch), archive_v1_storage and _storageDiff
over WebSocket (the id, then the events; stop; the per-socket limit), refusals on the wrong
transport, rpc_methods (every method it lists passes the allowlist; never a
write), prices and usage records."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from addon.chain.header_hash import encode_header
from addon.hooks.pipeline import RpcPipeline
from addon.pipeline.context import RpcContext
from addon.rpc.jsonrpc import Call, Parsed
from addon.rpc.new_spec import ARCHIVE, CHAIN_HEAD, CHAIN_SPEC, TRANSACTION, CallFailed
from addon.steps import new_spec_reads as step
from addon.steps.allowlist import allowlist
from addon.upstream.pool import (
    TIER_LAGGING,
    TIER_SYNCED,
    TIER_UNHEALTHY,
    TIER_UNPROBED,
    Upstream,
)
from tests.addon.helpers import (
    FakeHub,
    FakeSocket,
    body,
    call,
    make,
    pipeline_with_hub,
    rpc_flow,
    run,
    ws_message,
)
from tests.addon.newspec.fakes import FakeLegacy

UNKNOWN = "0x" + "ee" * 32


def _http(**proxy: Any) -> tuple[list[Any], FakeLegacy, Any]:
    stages, _, rt = make(**proxy)
    legacy = FakeLegacy({"0x01": "0x11", "0x0102": "0x12"})
    rt.legacy = legacy
    return stages, legacy, rt


def _ws(hub: FakeHub | None = None, **proxy: Any) -> tuple[RpcPipeline, FakeLegacy, Any]:
    pipe, rt = pipeline_with_hub(hub or FakeHub(), **proxy)
    legacy = FakeLegacy({"0x01": "0x11", "0x0102": "0x12"})
    rt.legacy = legacy
    return pipe, legacy, rt


async def _ask(stages: list[Any], method: str, params: Any = None) -> Any:
    f = await run(stages, rpc_flow(call(method, params)))
    assert f.response.status_code == 200, body(f)
    return body(f)


async def test_archive_and_chain_spec_reads_over_http() -> None:
    stages, legacy, rt = _http()
    h3 = legacy.hashes[3]
    encoded = encode_header(legacy.header_at(3))
    assert encoded is not None
    assert (await _ask(stages, "archive_v1_header", [h3]))["result"] == "0x" + encoded.hex()
    assert (await _ask(stages, "archive_v1_body", [h3]))["result"] == ["0x03", "0xabcd"]
    called = (await _ask(stages, "archive_v1_call", [h3, "Core_version", "0x"]))["result"]
    assert called["success"] is True and called["value"].startswith("0x")
    failed = (await _ask(stages, "archive_v1_call", [h3, "Panics_now", "0x"]))["result"]
    assert failed["success"] is False and "wasm trap" in failed["error"]
    assert (await _ask(stages, "archive_v1_hashByHeight", [4]))["result"] == [legacy.hashes[4]]
    assert (await _ask(stages, "archive_v1_hashByHeight", [99]))["result"] == []
    assert (await _ask(stages, "archive_v1_genesisHash"))["result"] == legacy.hashes[0]
    assert (await _ask(stages, "chainSpec_v1_genesisHash"))["result"] == legacy.hashes[0]
    assert (await _ask(stages, "chainSpec_v1_chainName"))["result"] == "Bittensor"
    assert (await _ask(stages, "chainSpec_v1_properties"))["result"]["tokenSymbol"] == "TAO"
    for method, params in [
        ("archive_v1_header", [UNKNOWN]),
        ("archive_v1_body", [UNKNOWN]),
        ("archive_v1_call", [UNKNOWN, "Core_version", "0x"]),
    ]:
        assert (await _ask(stages, method, params))["result"] is None
    assert "archive_v1_storage" not in {m for m, _ in legacy.calls}
    records = rt.usage.drain()
    assert sum(r["requests"] for r in records) == 13
    assert {r["endpoint"] for r in records} == {None}


async def test_the_finalized_height_never_goes_back() -> None:
    stages, legacy, _ = _http()
    step._finalized.pop("finney", None)
    assert (await _ask(stages, "archive_v1_finalizedHeight"))["result"] == 8
    legacy.finalized = 6  # the next node asked lags
    assert (await _ask(stages, "archive_v1_finalizedHeight"))["result"] == 8
    legacy.finalized = 9
    assert (await _ask(stages, "archive_v1_finalizedHeight"))["result"] == 9
    assert legacy.methods()[:2] == ["chain_getFinalizedHead", "chain_getHeader"]


def _up(uid: str, tier: int, finalized: int | None, **kw: Any) -> Upstream:
    return Upstream(uid, f"http://{uid}", uid, False, tier=tier, finalized=finalized, **kw)


def test_the_finalized_height_is_the_least_of_the_nodes_calls_go_to_first() -> None:
    ups = [_up("ahead", TIER_SYNCED, 120), _up("synced-behind", TIER_SYNCED, 117)]
    assert step.least_finalized(ups) == 117  # each synced node holds every block to 117
    ups += [
        _up("lagging", TIER_LAGGING, 90),  # resyncing for hours: never holds answers back
        _up("down", TIER_UNHEALTHY, 10),  # calls never go there: not counted
        _up("new", TIER_UNPROBED, 5),
        _up("other-chain", TIER_SYNCED, 1, foreign=True),
        _up("outvoted", TIER_SYNCED, 2, quarantined=True),
        _up("unknown", TIER_SYNCED, None),
    ]
    assert step.least_finalized(ups) == 117
    assert step.least_finalized(ups[2:]) == 90  # no synced node: the lagging ones are it
    assert step.least_finalized(ups[3:]) is None  # then a node is asked, as before


async def test_the_finalized_height_asks_a_node_once_the_snapshot_is_stale() -> None:
    """The sidecar down: its last snapshot stays in the pools, and would
    answer its heights for as long (no node asked)."""
    stages, legacy, rt = _http()
    step._finalized.pop("finney", None)
    now = [1000.0]
    rt.clock = lambda: now[0]
    for u in rt.pools["finney"].upstreams.values():
        u.tier, u.finalized = TIER_SYNCED, 5
    rt.chain.set_heights("finney", 10, 5, at=now[0])
    assert (await _ask(stages, "archive_v1_finalizedHeight"))["result"] == 5
    assert legacy.methods() == []  # no node asked: the snapshot's
    now[0] += step.SNAPSHOT_FRESH_S + 1  # no snapshot since
    legacy.finalized = 9
    assert (await _ask(stages, "archive_v1_finalizedHeight"))["result"] == 9
    assert legacy.methods()[:2] == ["chain_getFinalizedHead", "chain_getHeader"]


async def test_errors_keep_the_nodes_code_and_bad_params_are_32602() -> None:
    stages, legacy, _ = _http()
    legacy.fail["system_chain"] = CallFailed(-32603, "all upstream attempts failed", {"x": 1})
    doc = await _ask(stages, "chainSpec_v1_chainName")
    assert doc["error"] == {
        "code": -32603,
        "message": "all upstream attempts failed",
        "data": {"x": 1},
    }
    doc = await _ask(stages, "archive_v1_header", ["0x12"])
    assert doc["error"]["code"] == -32602
    doc = await _ask(stages, "archive_v1_hashByHeight", [])
    assert doc["error"]["code"] == -32602


async def test_a_batch_mixes_new_and_legacy_calls() -> None:
    stages, legacy, _ = _http()
    batch = [
        call("archive_v1_hashByHeight", [2], id_="a"),
        call("system_name", id_="b"),
        call("chainSpec_v1_chainName", id_="c"),
        call("transaction_v1_broadcast", ["0x00"], id_="d"),
    ]
    f = await run(stages, rpc_flow(batch))
    doc = body(f)
    assert [d["id"] for d in doc] == ["a", "b", "c", "d"]
    assert doc[0]["result"] == [legacy.hashes[2]] and doc[1]["result"] == "system_name-ok"
    assert doc[2]["result"] == "Bittensor"
    assert doc[3]["error"]["data"]["reason"].startswith("writes are not served")


async def test_wrong_transport_and_switched_off_families_are_refused() -> None:
    stages, _, _ = _http(new_spec={"chain_spec": False})
    for method, words in [
        ("archive_v1_storage", "subscription"),
        ("chainHead_v1_follow", "WebSocket"),
        ("transactionWatch_v1_submitAndWatch", "writes are not served"),
        ("chainSpec_v1_chainName", "proxy.new_spec.chain_spec"),
    ]:
        f = await run(stages, rpc_flow(call(method, [])))
        assert f.response.status_code == 403
        data = body(f)["error"]["data"]
        assert data["policy"] == "allowlist" and words in data["reason"], data


async def _wait(cond: Any) -> None:
    for _ in range(400):
        if cond():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("timed out")


async def test_archive_storage_over_a_websocket() -> None:
    pipe, legacy, _ = _ws()
    sock = FakeSocket()
    h = legacy.hashes[5]
    items = [{"key": "0x01", "type": "value"}, {"key": "0x01", "type": "descendantsValues"}]
    rpc, doc = await ws_message(pipe, sock, call("archive_v1_storage", [h, items, None]))
    op_id = doc["result"]
    assert isinstance(op_id, str) and sock.sent == []  # events only after the answer
    for after in rpc.afters or ():
        after()
    await _wait(lambda: sock.sent and b"storageDone" in sock.sent[-1])
    notes = [json.loads(b) for b in sock.sent]
    assert {n["params"]["subscription"] for n in notes} == {op_id}
    results = [n["params"]["result"] for n in notes]
    assert results == [
        {"event": "storage", "key": "0x01", "value": "0x11"},
        {"event": "storage", "key": "0x01", "value": "0x11"},
        {"event": "storage", "key": "0x0102", "value": "0x12"},
        {"event": "storageDone"},
    ]
    _, doc = await ws_message(pipe, sock, call("archive_v1_stopStorage", [op_id]))
    assert doc == {"jsonrpc": "2.0", "id": 1, "result": None}
    assert len(step.OPERATIONS) == 0
    assert rpc.rate is not None and rpc.rate.remaining == 100 - 1 - 11  # 1 value item, 1 page


async def test_later_pages_are_charged_and_counted_in_the_usage_units() -> None:
    pipe, legacy, rt = _ws()
    legacy.storage.update({f"0x01{i:04x}": "0x55" for i in range(250)})
    sock = FakeSocket()
    items = [{"key": "0x01", "type": "descendantsValues"}]
    rpc, _ = await ws_message(pipe, sock, call("archive_v1_storage", [legacy.hashes[5], items]))
    for after in rpc.afters or ():
        after()
    await _wait(lambda: sock.sent and b"storageDone" in sock.sent[-1])
    assert len(sock.sent) == 253  # 0x01, 0x0102, 250 more, done
    assert rpc.rate is not None
    charged = 100 - rpc.rate.remaining
    later = await ws_message(pipe, sock, call("system_name", id_=2))
    assert later[0].rate is not None
    # three pages of keys and values: more than the one page paid up front
    taken = 100 - later[0].rate.remaining - 1
    assert taken > charged == 11
    units = {r["method"]: r.get("units", 0) for r in rt.usage.drain()}
    assert units["archive_v1_storage"] == taken  # the statistics see what the quota took


async def test_archive_storage_diff_over_a_websocket() -> None:
    pipe, legacy, _ = _ws(new_spec={"operations": 2})
    sock = FakeSocket()
    before = legacy.hashes[4]  # the parent of block 5: nothing stored there
    keys, query = legacy._state_getKeysPaged, legacy._state_queryStorageAt

    def empty_keys(prefix: str, count: int, start: str | None, at: str) -> Any:
        return [] if at == before else keys(prefix, count, start, at)

    def empty_query(asked: list[str], at: str) -> Any:
        if at == before:
            return [{"block": at, "changes": [[k, None] for k in asked]}]
        return query(asked, at)

    legacy._state_getKeysPaged = empty_keys  # type: ignore[method-assign]
    legacy._state_queryStorageAt = empty_query  # type: ignore[method-assign]
    items = [{"key": "0x01", "returnType": "value"}]
    rpc, doc = await ws_message(
        pipe, sock, call("archive_v1_storageDiff", {"hash": legacy.hashes[5], "items": items})
    )
    op_id = doc["result"]
    assert isinstance(op_id, str) and sock.sent == []  # events only after the answer
    for after in rpc.afters or ():
        after()
    await _wait(lambda: sock.sent and b"storageDiffDone" in sock.sent[-1])
    notes = [json.loads(b) for b in sock.sent]
    assert {n["method"] for n in notes} == {"archive_v1_storageDiffEvent"}
    assert {n["params"]["subscription"] for n in notes} == {op_id}
    assert [n["params"]["result"] for n in notes] == [
        {"event": "storageDiff", "key": "0x01", "value": "0x11", "type": "added"},
        {"event": "storageDiff", "key": "0x0102", "value": "0x12", "type": "added"},
        {"event": "storageDiffDone"},
    ]
    # two headers and a page at each block: what it read cost no more
    assert rpc.rate is not None and rpc.rate.remaining == 100 - (2 + 2 * 11)
    _, doc = await ws_message(pipe, sock, call("archive_v1_stopStorageDiff", [op_id]))
    assert doc == {"jsonrpc": "2.0", "id": 1, "result": None}
    # an unknown block is the operation's error event, after its id
    sock.sent.clear()
    rpc, doc = await ws_message(pipe, sock, call("archive_v1_storageDiff", [UNKNOWN]))
    for after in rpc.afters or ():
        after()
    await _wait(lambda: bool(sock.sent))
    (note,) = [json.loads(b)["params"]["result"] for b in sock.sent]
    assert note["event"] == "storageDiffError" and "UnknownBlock" in note["error"]
    # bad params are -32602 before any id; the socket's operations are one count
    _, bad = await ws_message(pipe, sock, call("archive_v1_storageDiff", [UNKNOWN, [{}]]))
    assert bad["error"]["code"] == -32602
    assert len(step.DIFFS) == 0


async def test_storage_and_diff_operations_share_the_limit_and_stop_apart() -> None:
    pipe, legacy, _ = _ws(new_spec={"operations": 2})
    gate = asyncio.Event()

    async def slow_call(network: str, method: str, params: list[Any]) -> Any:
        if method in ("state_queryStorageAt", "state_getKeysPaged"):
            await gate.wait()
        return await FakeLegacy.call(legacy, network, method, params)

    legacy.call = slow_call  # type: ignore[method-assign]
    sock = FakeSocket()
    h = legacy.hashes[5]
    rpc, stored = await ws_message(
        pipe, sock, call("archive_v1_storage", [h, [{"key": "0x01", "type": "value"}]])
    )
    for after in rpc.afters or ():
        after()
    rpc, diffed = await ws_message(pipe, sock, call("archive_v1_storageDiff", [h], id_=2))
    for after in rpc.afters or ():
        after()
    _, refused = await ws_message(pipe, sock, call("archive_v1_storageDiff", [h], id_=3))
    assert refused["error"]["data"] == {
        "policy": "max_subscriptions",
        "reason": "wait for one to end (or stop one with archive_v1_stopStorage "
        "or archive_v1_stopStorageDiff)",
        "limit": 2,
    }
    # malformed params are -32602 even at the limit
    _, bad = await ws_message(pipe, sock, call("archive_v1_storageDiff", [h, 5], id_=4))
    assert bad["error"]["code"] == -32602
    diff_task = step.DIFFS._ops[diffed["result"]].task
    # a stopStorage does not stop a diff (ids of one kind), a stopStorageDiff does
    await ws_message(pipe, sock, call("archive_v1_stopStorage", [diffed["result"]], id_=5))
    assert diffed["result"] in step.DIFFS._ops
    await ws_message(pipe, sock, call("archive_v1_stopStorageDiff", [diffed["result"]], id_=6))
    assert len(step.DIFFS) == 0 and len(step.OPERATIONS) == 1
    # the socket closes: its operations end at once, not at their next page
    step.release(sock)
    assert len(step.OPERATIONS) == 0
    gate.set()
    assert diff_task is not None
    with contextlib.suppress(asyncio.CancelledError):
        await diff_task
    assert diff_task.cancelled() and sock.sent == []
    assert stored["result"] != diffed["result"]


async def test_archive_storage_limits_and_stops() -> None:
    pipe, legacy, rt = _ws(new_spec={"operations": 1})
    gate = asyncio.Event()
    real = legacy._state_queryStorageAt

    async def slow_call(network: str, method: str, params: list[Any]) -> Any:
        if method == "state_queryStorageAt":
            await gate.wait()
            return real(*params)
        return await FakeLegacy.call(legacy, network, method, params)

    legacy.call = slow_call  # type: ignore[method-assign]
    sock = FakeSocket()
    args = [legacy.hashes[5], [{"key": "0x01", "type": "value"}]]
    rpc, doc = await ws_message(pipe, sock, call("archive_v1_storage", args))
    for after in rpc.afters or ():
        after()
    _, refused = await ws_message(pipe, sock, call("archive_v1_storage", args, id_=2))
    assert refused["error"]["data"]["policy"] == "max_subscriptions"
    assert refused["error"]["data"]["limit"] == 1
    _, other = await ws_message(pipe, FakeSocket(), call("archive_v1_storage", args, id_=3))
    assert "result" in other  # another socket has its own
    task = step.OPERATIONS._ops[doc["result"]].task
    assert task is not None
    await ws_message(pipe, sock, call("archive_v1_stopStorage", [doc["result"]]))
    gate.set()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled() and sock.sent == []  # stopped: nothing more, not even storageDone
    _, bad = await ws_message(
        pipe, sock, call("archive_v1_storage", [legacy.hashes[5], [{"key": "0x01"}]])
    )
    assert bad["error"]["code"] == -32602
    records = [r for r in rt.usage.drain() if r["method"] == "archive_v1_storage"]
    # two started, one malformed; the refusal by the limit is not a proxied call
    assert sum(r["requests"] for r in records) == 3
    assert sum(r["errors"] for r in records) == 1


_WS_ONLY = {
    "archive_v1_storage",
    "archive_v1_stopStorage",
    "archive_v1_storageDiff",
    "archive_v1_stopStorageDiff",
}


async def test_rpc_methods_lists_what_passes_the_allowlist_by_whole_groups() -> None:
    """Everything listed passes the allowlist, but for the archive_v1 group's
    subscriptions over HTTP: the spec lists a group whole (all or nothing)."""
    configs: list[dict[str, Any]] = [
        {},
        {"allowlist_extra": ["author_submitExtrinsic", "transaction_v1_broadcast"]},
        {"new_spec": {"archive": False, "chain_head": False}},
        {"allowlist": ["chain_getHeader"], "websocket": {"subscriptions": False}},
    ]
    for proxy in configs:
        for serves in (True, False):
            pipe, _, rt = _ws(FakeHub(serves=serves), **proxy)
            for sock in (None, FakeSocket()):
                if sock is None:
                    f = await run([pipe], rpc_flow(call("rpc_methods")))
                    methods = body(f)["result"]["methods"]
                else:
                    _, doc = await ws_message(pipe, sock, call("rpc_methods"))
                    methods = doc["result"]["methods"]
                assert "rpc_methods" in methods and methods == sorted(methods)
                assert not [m for m in methods if m.lower().startswith(("author_", "transaction"))]
                rpc = RpcContext("finney", 0.0, sock or FakeSocket(), socket=sock)
                rpc.parsed = Parsed(tuple(Call(i, m, []) for i, m in enumerate(methods)), True)
                rpc.answers = [None] * len(methods)
                allowlist(rpc, rt)
                refused = {m for m, a in zip(methods, rpc.answers, strict=True) if a is not None}
                over_http = _WS_ONLY if sock is None and rt.config.proxy.new_spec.archive else set()
                assert refused == over_http, (proxy, serves, sock, refused)
                ws_head = sock is not None and serves and rt.config.proxy.new_spec.chain_head
                assert (set(CHAIN_HEAD) <= set(methods)) == ws_head
                if rt.config.proxy.new_spec.archive:
                    assert set(ARCHIVE) <= set(methods)
                assert set(CHAIN_SPEC) <= set(methods)
                assert not set(TRANSACTION) & set(methods)
