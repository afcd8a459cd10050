"""The usage spool and the edge cache on a full disk: a real tmpfs filled up
(``tests.tmpfs``; skipped where mounting is not permitted). Records the spool
cannot take wait in a bounded memory backlog and are delivered later; the
failure is logged once and its end once; a cache that cannot write is a miss.
A sidecar answering 503 keeps the batch (a real aiohttp server)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from addon.cache.store import DiskCacheStore
from addon.reporting.sidecar_client import SidecarClient
from addon.reporting.spool import Backlog
from addon.reporting.usage import Spool, SpoolError, UsageAggregator, UsageShipper, new_batch
from common.config import SidecarConfig
from tests.addon.test_usage import Clock, rec
from tests.tmpfs import fill, tmpfs

Batch = dict[str, Any]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "2m") as d:
        yield d


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
    agg = UsageAggregator(Clock())
    return UsageShipper(agg, spool, sidecar, flush_s=1, **kw), agg


def lines(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records)


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
        rec(agg, latency_ms=float(i + 1))
        ship.spool_pending()
        assert await ship.deliver_spooled() is False  # the sidecar is down too
    assert len(ship.backlog) == 5 and len(ship.spool) == 0
    assert lines(caplog, "usage spool unusable") == 1  # once, not per batch

    filler.unlink()
    ship.spool_pending()  # nothing new: the backlog moves to the spool
    assert len(ship.backlog) == 0 and len(ship.spool) == 5
    assert lines(caplog, "usage spool works again") == 1
    sidecar.up = True
    assert await ship.deliver_spooled() is True
    assert [b["rollups"][0]["latency_ms_sum"] for b in sidecar.got] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert len({b["batch_id"] for b in sidecar.got}) == 5 and len(ship.spool) == 0
    assert lines(caplog, "usage spool unusable") == 1


async def test_batches_in_memory_are_delivered_while_the_spool_stays_full(disk: Path) -> None:
    sidecar = Sidecar(up=True)
    ship, agg = shipper(Spool(disk / "spool", max_batches=100), sidecar)
    fill(disk)
    for _ in range(3):
        rec(agg)
        ship.spool_pending()
        assert await ship.deliver_spooled() is True
    assert sidecar.calls() == 3 and len(ship.backlog) == 0
    assert ship.spool_outage.failing  # no write worked: no recovery announced


async def test_a_delivered_batch_the_spool_cannot_forget_is_not_sent_again(disk: Path) -> None:
    sidecar = Sidecar(up=True)
    ship, agg = shipper(Spool(disk / "spool", max_batches=100), sidecar)
    for _ in range(3):
        rec(agg)
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
        rec(agg)
        rec(agg, method=f"m{i}")
        ship.spool_pending()
    assert len(ship.backlog) == 3
    assert (ship.backlog.dropped, ship.backlog.dropped_calls) == (2, 4)
    assert lines(caplog, "dropped the oldest") == 1  # the first drop, then every 100th
    ship.lost_at_stop()
    assert lines(caplog, "3 batches (6 calls) kept in memory are lost") == 1


def test_backlog_keeps_order_and_its_bound() -> None:
    b = Backlog(2)
    batches = [new_batch([{"requests": i}], float(i)) for i in range(1, 4)]
    assert b.push(batches[0]) is None and b.push(batches[1]) is None
    assert b.push(batches[2]) is batches[0]
    assert (b.dropped, b.dropped_calls, b.calls()) == (1, 1, 5)
    assert b.first() is batches[1]
    b.remove(batches[1])
    b.remove(batches[1])  # gone already: no error
    assert list(b) == [batches[2]]


@pytest.mark.parametrize(("status", "leaves_the_spool"), [(200, True), (503, False), (400, True)])
async def test_a_503_from_the_sidecar_keeps_the_batch(
    aiohttp_server: Any, status: int, leaves_the_spool: bool
) -> None:
    seen: list[Batch] = []

    async def usage(request: web.Request) -> web.Response:
        seen.append(await request.json())
        body = {"error": {"code": status, "message": "database or disk is full"}}
        return web.json_response(body, status=status, headers={"Retry-After": "10"})

    app = web.Application()
    app.router.add_post("/api/v1/internal/usage", usage)
    server = await aiohttp_server(app)
    client = SidecarClient(SidecarConfig(url=str(server.make_url(""))), passthrough_timeout_s=5)
    async with aiohttp.ClientSession() as session:
        client.session = session
        batch = new_batch([{"requests": 1}], 1.0)
        assert await client.post_usage(batch) is leaves_the_spool
    assert seen == [batch]


def test_a_cache_on_a_full_disk_is_a_miss_logged_once_and_works_again(
    disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="chainproxy.cache")
    store = DiskCacheStore(disk / "cache", size_limit_mb=1)
    store.set("old", {"block": 0})
    filler = fill(disk)
    for i in range(50):
        store.set(f"new{i}", {"block": i})  # never raises
        assert store.get(f"new{i}") is None  # not stored: a miss again
    assert store.get("old") == {"block": 0}  # the memory copy still answers
    assert store.errors >= 50
    assert lines(caplog, "treated as a miss until it works again") == 1
    filler.unlink()
    store.set("new", {"block": 2})
    assert store.get("new") == {"block": 2}
    assert lines(caplog, "cache works again") == 1
    store.close()


def test_a_cache_opened_on_a_full_disk_is_kept_and_opened_once_space_is_back(
    disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = DiskCacheStore(disk / "cache", size_limit_mb=1)
    first.set("old", {"block": 0})
    first.close()
    filler = fill(disk)
    # A proxy (re)started on the full disk: a miss, not an error, and the cache
    # is not mistaken for a corrupt one (it would be moved aside, i.e. lost).
    store = DiskCacheStore(disk / "cache", size_limit_mb=1, reopen_after_s=0)
    store.set("new", {"block": 1})
    assert store.get("old") is None and store.get("new") is None
    assert not list(disk.glob("cache.corrupt-*"))
    assert lines(caplog, "cache open failed") == 1
    filler.unlink()
    assert store.get("old") == {"block": 0}  # opened now, the old entries intact
    store.set("new", {"block": 1})
    assert store.get("new") == {"block": 1}
    store.close()
