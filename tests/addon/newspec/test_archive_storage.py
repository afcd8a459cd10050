"""archive_v1_storage operations: their notifications (an event per item,
then storageDone or storageError), stopping one (only by its socket), a
socket that goes away, and the metered legacy calls behind them."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from addon.newspec.archive_storage import StorageOperations
from addon.newspec.metered import MeteredCaller
from addon.newspec.storage_items import StorageQuery, storage_items
from addon.rpc.new_spec import CallFailed
from common.config.model import CostConfig
from tests.addon.newspec.fakes import FakeLegacy


class Sink:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.live = True

    def send(self, body: bytes) -> None:
        self.sent.append(json.loads(body))

    def results(self) -> list[dict[str, Any]]:
        return [d["params"]["result"] for d in self.sent]


async def _settle(ops: StorageOperations) -> None:
    for _ in range(200):
        if not len(ops):
            return
        await asyncio.sleep(0)
    raise AssertionError("the operation did not end")


async def test_items_then_done_as_notifications() -> None:
    legacy = FakeLegacy({"0x01": "0x11", "0x0102": "0x12"})
    ops, sink = StorageOperations(), Sink()
    op_id = ops.new_id()
    queries = [StorageQuery("0x01", "value"), StorageQuery("0x01", "descendantsHashes")]
    pages = storage_items(legacy, "finney", legacy.hashes[2], queries, page_items=1)
    ops.start(op_id, sink, pages, sink.send, lambda: sink.live, child_trie="0xc0de")
    assert ops.held(sink) == 1
    await _settle(ops)
    assert {d["method"] for d in sink.sent} == {"archive_v1_storageEvent"}
    assert {d["params"]["subscription"] for d in sink.sent} == {op_id}
    results = sink.results()
    assert results[0] == {
        "event": "storage",
        "key": "0x01",
        "value": "0x11",
        "childTrieKey": "0xc0de",
    }
    assert [r["key"] for r in results[1:3]] == ["0x01", "0x0102"] and "hash" in results[1]
    assert results[3:] == [{"event": "storageDone"}]
    assert ops.held(sink) == 0


async def test_a_failed_legacy_call_is_a_storage_error() -> None:
    legacy = FakeLegacy({"0x01": "0x11"})
    ops, sink = StorageOperations(), Sink()
    pages = storage_items(legacy, "finney", "0x" + "ee" * 32, [StorageQuery("0x01", "value")])
    ops.start(ops.new_id(), sink, pages, sink.send, lambda: True)
    await _settle(ops)
    [end] = sink.results()
    assert end["event"] == "storageError" and "UnknownBlock" in end["error"]


async def test_stop_ends_it_silently_and_only_for_its_socket() -> None:
    gate = asyncio.Event()

    async def slow() -> AsyncIterator[list[dict[str, str]]]:
        yield [{"key": "0x01", "value": "0x11"}]
        await gate.wait()
        yield [{"key": "0x02", "value": "0x22"}]

    ops, sink, other = StorageOperations(), Sink(), Sink()
    op_id = ops.new_id()
    ops.start(op_id, sink, slow(), sink.send, lambda: True)
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(sink.sent) == 1
    assert not ops.stop(op_id, other) and not ops.stop("nope", sink) and not ops.stop(7, sink)
    task = ops._ops[op_id].task
    assert task is not None
    assert ops.stop(op_id, sink)
    gate.set()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert len(sink.sent) == 1 and len(ops) == 0  # no storageDone after a stop


async def test_a_socket_gone_ends_it_at_the_next_page() -> None:
    legacy = FakeLegacy({f"0x01{i:02x}": "0x11" for i in range(10)})
    ops, sink = StorageOperations(), Sink()
    sink.live = False
    pages = storage_items(
        legacy, "finney", legacy.hashes[1], [StorageQuery("0x01", "descendantsValues")]
    )
    ops.start(ops.new_id(), sink, pages, sink.send, lambda: sink.live)
    await _settle(ops)
    assert sink.sent == []


async def test_metered_calls_charge_past_what_was_paid() -> None:
    legacy = FakeLegacy({f"0x01{i:04x}": "0x11" for i in range(350)})
    charged: list[int] = []
    costs = CostConfig()
    metered = MeteredCaller(legacy, costs, prepaid=11, charge=charged.append)
    query = StorageQuery("0x01", "descendantsValues")
    pages = [p async for p in storage_items(metered, "finney", legacy.hashes[1], [query])]
    assert sum(len(p) for p in pages) == 350
    # 4 pages of keys (1 unit each) and their values (10, 10, 10, 5): 39 units, 11 paid
    assert charged == [1, 10, 1, 10, 1, 5] and metered.spent == 39
    free = MeteredCaller(legacy, CostConfig(enabled=False), prepaid=1, charge=charged.append)
    before = list(charged)
    await free.call("finney", "state_getKeysPaged", ["0x01", 100, None, legacy.hashes[1]])
    assert charged == before


async def test_metered_errors_still_count() -> None:
    legacy = FakeLegacy()
    legacy.fail["state_getKeysPaged"] = CallFailed(-32603, "down")
    charged: list[int] = []
    metered = MeteredCaller(legacy, CostConfig(), prepaid=0, charge=charged.append)
    try:
        await metered.call("finney", "state_getKeysPaged", ["0x", 1000, None, legacy.hashes[1]])
    except CallFailed:
        pass
    assert charged == [10]
