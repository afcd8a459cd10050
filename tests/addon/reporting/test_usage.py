"""Usage records in the addon: per-minute pre-aggregation, and delivery that loses
nothing (the sidecar down, the process stopped)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from addon.reporting.live_metrics import USAGE_DROPPED, LiveMetrics
from addon.reporting.spool import SpoolError
from addon.reporting.usage import Spool, UsageAggregator, UsageShipper
from common import latency_hist
from tests.addon.helpers import (
    usage_record,
)
from tests.fakes import FakeClock


def test_records_roll_up_per_minute_network_endpoint_and_method() -> None:
    clock = FakeClock(1_700_000_000.0)
    agg = UsageAggregator(clock)
    for ms in (10, 20, 30):
        usage_record(agg, latency_ms=ms)
    usage_record(agg, error=True, failover=True)
    usage_record(agg, endpoint=None, cache_hit=True, latency_ms=0.3)
    usage_record(agg, method="chain_getBlock")
    clock.t += 60
    usage_record(agg)
    rollups = agg.drain()
    assert len(rollups) == 4 and agg.drain() == []  # drained once
    main = next(
        r
        for r in rollups
        if r["endpoint"] == "e1"
        and r["method"] == "chain_getHeader"
        and r["minute"] == (1_700_000_000 // 60)
    )
    assert (main["requests"], main["errors"], main["failovers"]) == (4, 1, 1)
    assert main["latency_ms_sum"] == 70.0
    assert sum(main["latency_hist"].values()) == 4
    hit = next(r for r in rollups if r["endpoint"] is None)
    assert hit["cache_hits"] == 1 and hit["requests"] == 1
    assert sum(r["requests"] for r in rollups) == agg.recorded == 7


def test_aggregation_does_not_grow_with_request_count() -> None:
    agg = UsageAggregator(FakeClock(1_700_000_000.0))
    for i in range(50_000):
        usage_record(agg, latency_ms=float(i % 900))
    assert len(agg) == 1
    (r,) = agg.drain()
    assert r["requests"] == 50_000 and len(r["latency_hist"]) < 400
    hist = latency_hist.from_wire(r["latency_hist"])
    p50 = latency_hist.quantile(hist, 0.5)
    assert p50 is not None and abs(p50 - 450) / 450 < 0.02


async def test_shipper_delivers_in_order_and_keeps_batches_while_the_sidecar_is_down(
    tmp_path: Path,
) -> None:
    agg = UsageAggregator(FakeClock(1_700_000_000.0))
    spool = Spool(tmp_path / "spool", max_batches=100)
    up = {"ok": False}
    received: list[dict[str, Any]] = []

    async def deliver(batch: dict[str, Any]) -> bool:
        if not up["ok"]:
            return False
        received.append(batch)
        return True

    shipper = UsageShipper(agg, spool, deliver, flush_s=0.01)
    for round_ in range(3):
        usage_record(agg, latency_ms=float(round_ + 1))
        shipper.spool_pending()
        assert await shipper.deliver_spooled() is False
    assert len(spool) == 3 and received == []

    up["ok"] = True
    assert await shipper.deliver_spooled() is True
    assert len(spool) == 0
    assert [b["rollups"][0]["latency_ms_sum"] for b in received] == [1.0, 2.0, 3.0]
    assert len({b["batch_id"] for b in received}) == 3


async def test_stop_spools_what_is_pending_and_a_new_process_sends_it(tmp_path: Path) -> None:
    agg = UsageAggregator(FakeClock(1_700_000_000.0))
    usage_record(agg)
    usage_record(agg)

    async def never(_: dict[str, Any]) -> bool:
        return False

    UsageShipper(agg, Spool(tmp_path / "s", max_batches=10), never, flush_s=1).spool_pending()
    got: list[dict[str, Any]] = []

    async def accept(batch: dict[str, Any]) -> bool:
        got.append(batch)
        return True

    later = UsageShipper(
        UsageAggregator(), Spool(tmp_path / "s", max_batches=10), accept, flush_s=1
    )
    assert await later.deliver_spooled() is True
    assert sum(r["requests"] for b in got for r in b["rollups"]) == 2


async def test_a_calls_units_reach_its_rollup() -> None:
    """What each call item was charged is summed into its method's rollup
    (the sidecar's top methods by units); a batch's items each their own."""
    from tests.addon.helpers import call, make, rpc_flow, run

    stages, _, rt = make()
    await run(stages, rpc_flow(call("system_health", id_=1)))
    batch = [call("state_getKeysPaged", ["0x", 1000], id_=2), call("system_health", id_=3)]
    await run(stages, rpc_flow(batch))
    units: dict[str, int] = {}
    for r in rt.usage.drain():  # (one rollup per endpoint that answered)
        units[r["method"]] = units.get(r["method"], 0) + r["units"]
    assert units == {"system_health": 2, "state_getKeysPaged": 10}  # 1000 keys: 10 units


async def test_records_are_spooled_every_flush_while_the_sidecar_refuses(tmp_path: Path) -> None:
    """A process killed outright loses only what it had not spooled: records
    go to the disk every ``flush_s`` even while deliveries back off (they
    waited up to ``max_retry_s`` in memory), and the deliveries do back off."""
    clock = FakeClock(1_700_000_000.0)
    agg = UsageAggregator(clock)
    spool = Spool(tmp_path / "spool", max_batches=100)
    tries: list[float] = []
    ticks = 0

    async def deliver(batch: dict[str, Any]) -> bool:
        tries.append(clock.t)
        return False

    async def sleep(delay: float) -> None:
        nonlocal ticks
        ticks += 1
        if ticks > 17:
            raise asyncio.CancelledError
        clock.t += delay
        usage_record(agg)  # a call answered during each flush interval

    shipper = UsageShipper(agg, spool, deliver, flush_s=2, clock=clock, max_retry_s=10, sleep=sleep)
    with pytest.raises(asyncio.CancelledError):
        await shipper.run()
    assert len(spool) == 17  # one batch per flush: none waited in memory
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert gaps == [4, 8, 10, 10]  # doubling from flush_s to the 10 s bound


async def test_records_are_spooled_while_a_delivery_hangs(tmp_path: Path) -> None:
    """A sidecar that takes a batch and never answers (or a long catch-up):
    the records of each flush still go to the disk meanwhile (they waited in
    memory for the whole delivery)."""
    agg = UsageAggregator()
    spool = Spool(tmp_path / "spool", max_batches=1000)
    hung = asyncio.Event()

    async def deliver(batch: dict[str, Any]) -> bool:
        hung.set()
        await asyncio.Event().wait()  # never answers
        return True

    async def calls() -> None:
        while True:
            usage_record(agg)
            await asyncio.sleep(0.005)

    shipper = UsageShipper(agg, spool, deliver, flush_s=0.02)
    traffic = asyncio.create_task(calls())
    run = asyncio.create_task(shipper.run())
    try:
        async with asyncio.timeout(10):
            await hung.wait()
            while len(spool) < 5:  # noqa: ASYNC110 - the shipper fills it
                await asyncio.sleep(0.01)
    finally:
        run.cancel()
        traffic.cancel()
        await asyncio.gather(run, traffic, return_exceptions=True)


async def test_batches_being_delivered_are_not_dropped_and_the_rest_are_counted(
    tmp_path: Path,
) -> None:
    """A hung sidecar past ``spool_max_batches``: the batches a delivery holds
    were trimmed (logged and counted as lost) and then delivered when the
    sidecar woke (the stats sweep: 6,885 calls said dropped, 2,959 missing).
    Now the held ones stay; what is dropped is exactly what never arrives,
    counted in ``chainproxy_usage_dropped_total`` for ``/metrics``."""
    agg, metrics = UsageAggregator(), LiveMetrics(())
    spool = Spool(tmp_path / "spool", max_batches=3)
    wake, sent = asyncio.Event(), asyncio.Event()
    arrived: list[dict[str, Any]] = []

    async def deliver(batch: dict[str, Any]) -> bool:
        sent.set()
        await wake.wait()  # a sidecar stopped (SIGSTOP), then going on
        arrived.append(batch)
        return True

    shipper = UsageShipper(agg, spool, deliver, flush_s=60, metrics=metrics)
    made = []
    for _ in range(2):  # two batches on disk before the delivery starts
        usage_record(agg)
        shipper.spool_pending()
        made.append(spool.oldest(10)[-1][0])
    delivering = asyncio.ensure_future(shipper.deliver_spooled())
    await sent.wait()
    for n in range(5):  # five more flushes while it hangs: the bound is 3
        for _ in range(n + 1):
            usage_record(agg)
        shipper.spool_pending()
    assert len(spool) == 3 + 2  # the two held ones passed over
    wake.set()
    assert await delivering
    # three new batches beside the two held: the oldest two new ones (1 + 2
    # calls) went, the held two arrived
    assert [b["batch_id"] for b in arrived] == made
    assert spool.dropped == 2 and len(spool) == 3
    # the count rides in the batches that follow (delivered, or still spooled) and the next
    kept = [b for _, b in spool.oldest(10)] + arrived
    counted = sum(v for b in kept for name, _, v in b["metrics"]["extra"] if name == USAGE_DROPPED)
    counted += sum(v for (name, _), v in metrics._extra.items() if name == USAGE_DROPPED)
    assert counted == 3


def test_a_batch_dropped_from_memory_is_counted_in_calls(tmp_path: Path) -> None:
    agg, metrics = UsageAggregator(), LiveMetrics(())
    spool = Spool(tmp_path / "spool", max_batches=10)

    async def deliver(batch: dict[str, Any]) -> bool:
        return False

    shipper = UsageShipper(agg, spool, deliver, flush_s=60, metrics=metrics, memory_max_batches=1)
    shipper.spool.append = _full  # type: ignore[method-assign]  # the disk is full
    for _ in range(2):
        usage_record(agg)
        usage_record(agg)
        shipper.spool_pending()
    lost = {k: v for (name, k), v in metrics._extra.items() if name == USAGE_DROPPED}
    assert lost == {(("reason", "memory_full"),): 2}


def _full(batch: dict[str, Any]) -> int:
    raise SpoolError("OSError: [Errno 28] No space left on device")
