"""The usage spool on a full disk: a real tmpfs filled up (``tests.tmpfs``; skipped where
mounting is not permitted). Records the spool cannot take wait in a bounded memory
backlog and are delivered later; the failure is logged once and its end once."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from addon.reporting.usage import Spool, SpoolError, UsageAggregator, UsageShipper, new_batch
from tests.addon.helpers import (
    log_lines,
    usage_record,
)
from tests.fakes import FakeClock
from tests.tmpfs import fill

Batch = dict[str, Any]


class Sidecar:
    """What a sidecar would accept: ``up`` decides; keeps what it took."""

    def __init__(self, up: bool = False) -> None:
        self.up = up
        self.got: list[Batch] = []

    async def __call__(self, batch: Batch) -> bool:
        if self.up:
            self.got.append(batch)
        return self.up

    def calls(self) -> int:
        return sum(r["requests"] for b in self.got for r in b["rollups"])


def shipper(spool: Spool, sidecar: Sidecar, **kw: Any) -> tuple[UsageShipper, UsageAggregator]:
    agg = UsageAggregator(FakeClock(1_700_000_000.0))
    return UsageShipper(agg, spool, sidecar, flush_s=1, **kw), agg


async def flushed_on_a_full_disk(
    disk: Path, sidecar: Sidecar, flushes: int
) -> tuple[UsageShipper, UsageAggregator]:
    """A shipper whose spool's disk is full, after ``flushes`` flushes of one
    call each, every delivery answered as ``sidecar.up`` says."""
    ship, agg = shipper(Spool(disk / "spool", max_batches=100), sidecar)
    fill(disk)
    for _ in range(flushes):
        usage_record(agg)
        ship.spool_pending()
        assert await ship.deliver_spooled() is sidecar.up
    return ship, agg


def test_a_spool_on_a_full_disk_raises_spool_error_and_works_once_space_is_back(
    disk: Path,
) -> None:
    spool = Spool(disk / "spool", max_batches=100)
    first = new_batch([{"requests": 1}], 1.0)
    spool.append(first)
    filler = fill(disk)
    with pytest.raises(SpoolError, match="full"):
        spool.append(new_batch([{"requests": 2}], 2.0))
    assert [k for k, _ in spool.oldest(10)] == [first["batch_id"]]  # reads still work
    assert len(spool) == 1
    filler.unlink()
    spool.append(new_batch([{"requests": 3}], 3.0))
    assert len(spool) == 2


def test_a_spool_opened_on_a_full_disk_is_opened_at_its_next_use(disk: Path) -> None:
    filler = fill(disk)
    spool = Spool(disk / "spool", max_batches=100)  # does not raise: the proxy starts
    assert len(spool) == 0
    with pytest.raises(SpoolError):
        spool.append(new_batch([{"requests": 1}], 1.0))
    filler.unlink()
    spool.append(new_batch([{"requests": 1}], 1.0))
    assert len(spool) == 1


async def test_what_the_spool_cannot_take_waits_in_memory_and_is_spooled_in_order_later(
    disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="chainproxy.usage")
    sidecar = Sidecar(up=False)
    ship, agg = shipper(Spool(disk / "spool", max_batches=100), sidecar)
    filler = fill(disk)
    for i in range(5):
        usage_record(agg, latency_ms=float(i + 1))
        ship.spool_pending()
        assert await ship.deliver_spooled() is False  # the sidecar is down too
    assert len(ship.backlog) == 5 and len(ship.spool) == 0
    assert log_lines(caplog, "usage spool unusable") == 1  # once, not per batch

    filler.unlink()
    ship.spool_pending()  # nothing new: the backlog moves to the spool
    assert len(ship.backlog) == 0 and len(ship.spool) == 5
    assert log_lines(caplog, "usage spool works again") == 1
    sidecar.up = True
    assert await ship.deliver_spooled() is True
    assert [b["rollups"][0]["latency_ms_sum"] for b in sidecar.got] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert len({b["batch_id"] for b in sidecar.got}) == 5 and len(ship.spool) == 0
    assert log_lines(caplog, "usage spool unusable") == 1


async def test_batches_in_memory_are_delivered_while_the_spool_stays_full(disk: Path) -> None:
    sidecar = Sidecar(up=True)
    ship, _ = await flushed_on_a_full_disk(disk, sidecar, 3)
    assert sidecar.calls() == 3 and len(ship.backlog) == 0
    assert ship.spool_outage.failing  # no write worked: no recovery announced


async def test_a_delivered_batch_the_spool_cannot_forget_is_not_sent_again(disk: Path) -> None:
    sidecar = Sidecar(up=True)
    ship, agg = shipper(Spool(disk / "spool", max_batches=100), sidecar)
    for _ in range(3):
        usage_record(agg)
        ship.spool_pending()
    filler = fill(disk)
    assert await ship.deliver_spooled() is True
    assert len(sidecar.got) == 3 and len(ship.spool) == 3  # a deletion needs space too
    assert await ship.deliver_spooled() is True
    assert len(sidecar.got) == 3  # not sent twice
    filler.unlink()
    ship.spool_pending()  # removed now
    assert len(ship.spool) == 0
    assert await ship.deliver_spooled() is True and len(sidecar.got) == 3


async def test_the_memory_backlog_is_bounded_and_a_drop_is_counted_and_logged(
    disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sidecar = Sidecar(up=False)
    ship, agg = shipper(Spool(disk / "spool", max_batches=100), sidecar, memory_max_batches=3)
    fill(disk)
    for i in range(5):
        usage_record(agg)
        usage_record(agg, method=f"m{i}")
        ship.spool_pending()
    assert len(ship.backlog) == 3
    assert (ship.backlog.dropped, ship.backlog.dropped_calls) == (2, 4)
    assert log_lines(caplog, "dropped the oldest") == 1  # the first drop, then every 100th
    ship.lost_at_stop()
    assert log_lines(caplog, "3 batches (6 calls) kept in memory are lost") == 1


async def test_at_a_drained_stop_what_memory_holds_gets_one_last_delivery(
    disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The sidecar was down while the disk was full (the run's retry backs off);
    it is back when the proxy stops: the stop delivers what memory holds, the
    records made since the last flush included, instead of losing them."""
    caplog.set_level(logging.INFO, logger="chainproxy.usage")
    sidecar = Sidecar(up=False)
    ship, agg = await flushed_on_a_full_disk(disk, sidecar, 3)
    usage_record(agg)  # after the last flush: spooled (here: kept) by the stop itself
    sidecar.up = True
    assert await ship.deliver_before_stop(1.0) == 4
    assert sidecar.calls() == 4 and len(ship.backlog) == 0
    ship.lost_at_stop()
    assert log_lines(caplog, "kept in memory are lost") == 0
    assert log_lines(caplog, "4 batches kept in memory delivered at stop") == 1


async def test_a_last_delivery_the_sidecar_does_not_answer_ends_at_its_timeout(
    disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A hanging sidecar holds the stop no longer than the timeout given; what
    was not taken is reported lost, as before."""

    async def hangs(batch: Batch) -> bool:
        await asyncio.sleep(3600)
        return True

    ship, agg = shipper(Spool(disk / "spool", max_batches=100), Sidecar())
    ship._deliver = hangs
    fill(disk)
    usage_record(agg)
    started = time.monotonic()
    assert await ship.deliver_before_stop(0.2) == 0
    assert time.monotonic() - started < 5
    ship.lost_at_stop()
    assert log_lines(caplog, "1 batches (1 calls) kept in memory are lost") == 1


async def test_a_stop_with_a_working_spool_sends_nothing(disk: Path) -> None:
    """What the spool took waits for the next process: a stop is not held
    up by a delivery when nothing would be lost."""
    sidecar = Sidecar(up=True)
    ship, agg = shipper(Spool(disk / "spool", max_batches=100), sidecar)
    usage_record(agg)
    assert await ship.deliver_before_stop(1.0) == 0
    assert sidecar.got == [] and len(ship.spool) == 1
