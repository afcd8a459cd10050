"""A full disk, end to end: the proxy's data directory (usage spool and edge
cache) and the sidecar's (its SQLite files) are small tmpfs mounts, filled with
a filler file while traffic flows. Every call is still answered, the sidecar
refuses usage batches with a JSON 503 but keeps serving reads, and once the
filler is removed every answered call is counted in the sidecar exactly once.

Real processes (simulated nodes, sidecar, mitmdump) and real mounts: needs
root (``mount -t tmpfs``); skipped otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from addon.cache.store import WRITE_EVERY_S
from chainproxy.commands import sidecar_argv
from tests.e2e.harness import Stack, base_config, http_json, wait_http
from tests.e2e.helpers import (
    PROXY_DEFAULTS,
    call,
    metric_value,
    metrics_text,
    next_client_ip,
    usage_delivered,
    wait_until,
)
from tests.tmpfs import fill, tmpfs

pytestmark = pytest.mark.e2e

MOUNT_SIZE = "8m"
FAST = {"probe": {"interval_s": 1, "head_interval_s": 0.5, "timeout_s": 1}}
PROXY = {
    **PROXY_DEFAULTS,
    "usage": {"flush_s": 0.5},
    "rate_limit": {"requests": 1_000_000, "window_s": 60},
}
SPOOL_FAILED = "usage spool unusable"
SPOOL_RECOVERED = "usage spool works again"


@pytest.fixture
def disks(tmp_path: Path) -> Iterator[tuple[Stack, Path, Path]]:
    """The stack with the proxy's and the sidecar's data directories on tmpfs."""
    proxy_dir, sidecar_dir = tmp_path / "proxy-data", tmp_path / "sidecar-data"
    stack = Stack(tmp_path)
    with contextlib.ExitStack() as mounts:
        mounts.enter_context(tmpfs(proxy_dir, MOUNT_SIZE))
        mounts.enter_context(tmpfs(sidecar_dir, MOUNT_SIZE))
        mounts.callback(stack.stop)  # before the unmounts
        epoch = time.time() - 600
        stack.start_nodes(("alpha", "beta"), epoch=epoch)
        top = {**FAST, "data_dir": str(proxy_dir)}
        stack.write_config(base_config(tmp_path, stack.nodes, top=top, **PROXY))
        assert stack.config_path is not None
        argv = [*sidecar_argv(stack.config_path), "--data-dir", str(sidecar_dir)]
        stack.sidecar = stack.sup.start("sidecar", argv)
        stack.sidecar_url = stack.config["sidecar"]["url"]
        wait_http(f"{stack.sidecar_url}/healthz", stack.sidecar)
        stack.proxy_sets = ("termlog_verbosity=info",)  # the spool's log lines
        stack.start_proxy()
        yield stack, proxy_dir, sidecar_dir


class Traffic:
    """Calls in a loop from a few concurrent workers; counts what was answered."""

    def __init__(self, url: str, hashes: list[str]) -> None:
        self.url = url
        self.hashes = hashes
        self.answered = 0
        self.bad: list[tuple[int, bytes]] = []
        self.stop = asyncio.Event()
        self.go = asyncio.Event()
        self.go.set()
        self.in_flight = 0
        self.idle = asyncio.Event()  # set while no call is in flight
        self.idle.set()
        self._i = 0

    def _next(self) -> dict[str, Any]:
        self._i += 1
        i = self._i
        if i % 3 == 0:  # a new block each time: a cache write
            return call("chain_getBlock", [self.hashes[(i // 3) % len(self.hashes)]], i)
        return call("system_health" if i % 3 == 1 else "chain_getHeader", id_=i)

    async def worker(self, session: aiohttp.ClientSession) -> None:
        while not self.stop.is_set():
            await self.go.wait()
            body = self._next()
            self.in_flight += 1
            self.idle.clear()
            try:
                async with session.post(self.url, json=body) as r:
                    raw = await r.read()
                    if r.status == 200 and json.loads(raw).get("id") == body["id"]:
                        self.answered += 1
                    else:
                        self.bad.append((r.status, raw[:300]))
            finally:
                self.in_flight -= 1
                if not self.in_flight:
                    self.idle.set()

    async def pause(self) -> None:
        """No more calls; returns when the last one in flight was answered."""
        self.go.clear()
        await self.idle.wait()

    async def run(self, workers: int = 3) -> None:
        connector = aiohttp.TCPConnector(local_addr=(next_client_ip(), 0))
        timeout = aiohttp.ClientTimeout(total=20)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as s:
            await asyncio.gather(*(self.worker(s) for _ in range(workers)))


async def one(url: str, body: dict[str, Any]) -> tuple[int, Any, str]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        return r.status, await r.json(content_type=None), r.headers.get("X-Cache", "")


def metric(stack: Stack, line_start: str) -> float:
    with contextlib.closing(urllib.request.urlopen(f"{stack.sidecar_url}/metrics", timeout=5)) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def failed_batches(stack: Stack) -> float:
    return metric(stack, 'chainproxy_usage_batches_total{result="failed"}')


def usage_requests(stack: Stack) -> int:
    return int(http_json(f"{stack.sidecar_url}/api/v1/usage")["requests"])


async def wait_for(pred: Any, timeout: float, step: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        await asyncio.sleep(step)
    return bool(pred())


async def test_a_full_disk_loses_no_call_and_counts_none_twice(
    disks: tuple[Stack, Path, Path],
) -> None:
    stack, proxy_dir, sidecar_dir = disks
    proxy = stack.proxy
    assert proxy is not None
    started = time.monotonic()
    hashes = [stack.nodes[0].rpc("chain_getBlockHash", [n])["result"] for n in range(1, 400)]
    traffic = Traffic(stack.rpc_url(), hashes[:-1])
    probe_hash = hashes[-1]  # asked for only while the proxy's disk is full
    runner = asyncio.create_task(traffic.run())
    extra = 0  # calls answered outside the traffic (counted in the usage too)

    async def all_counted(timeout: float) -> int:
        """Pause the traffic until the sidecar counted every call answered."""
        await traffic.pause()
        answered = traffic.answered + extra
        ok = await wait_for(lambda: usage_requests(stack) >= answered, timeout)
        assert ok, f"usage {usage_requests(stack)} never reached the {answered} calls answered"
        # every batch made so far has arrived (the ones from memory too) ...
        await usage_delivered(stack, timeout)
        await asyncio.sleep(1)  # ... and, a little later, nothing more did: none counted twice
        assert usage_requests(stack) == answered
        return answered

    try:
        assert await wait_for(lambda: usage_requests(stack) > 0, 10), "no usage reached the sidecar"

        # 1. Both disks full, traffic flowing.
        proxy_filler, sidecar_filler = fill(proxy_dir), fill(sidecar_dir)
        at_fill = traffic.answered
        # The sidecar refuses the proxy's batches (503) ...
        assert await wait_for(lambda: failed_batches(stack) > 0, 10), "no ingest was refused"
        # ... and ours, with a JSON error body, while it keeps serving reads.
        empty = {"batch_id": os.urandom(16).hex(), "sent_at": time.time(), "rollups": []}
        status, doc, _ = await one(f"{stack.sidecar_url}/api/v1/internal/usage", empty)
        assert status == 503 and doc["error"]["code"] == 503, (status, doc)
        for path in ("/api/v1/usage", "/api/v1/registry/totals", "/api/v1/incidents"):
            assert isinstance(http_json(f"{stack.proxy_url}{path}"), dict), path
        async with aiohttp.ClientSession() as s, s.get(f"{stack.proxy_url}/") as r:
            assert r.status == 200 and "<html" in (await r.text()).lower()
        # A cache write that fails is a miss: the block is a MISS, and once its
        # batch went to the full disk (``WRITE_EVERY_S`` later, by the writer
        # thread; meanwhile the memory answers it) a MISS again.
        status, doc, xcache = await one(stack.rpc_url(), call("chain_getBlock", [probe_hash]))
        assert status == 200 and doc["result"]["block"] and xcache == "MISS", (status, xcache)
        extra += 1

        async def missed_again() -> bool:
            nonlocal extra
            status, doc, xcache = await one(stack.rpc_url(), call("chain_getBlock", [probe_hash]))
            extra += 1
            assert status == 200 and doc["result"]["block"], status
            return xcache == "MISS"

        await wait_until(missed_again, 10, "the failed cache write to be a miss again")
        assert await wait_for(lambda: traffic.answered > at_fill + 50, 10), (
            "calls stopped being answered on a full disk"
        )
        assert not traffic.bad, traffic.bad[:3]
        assert proxy.output().count(SPOOL_FAILED) == 1

        # 2. The sidecar's disk is freed, the proxy's stays full: the batches the
        # proxy kept in memory (refused with 503 meanwhile) are delivered from there.
        sidecar_filler.unlink()
        answered = await all_counted(20)
        assert SPOOL_RECOVERED not in proxy.output(), "the spool was never unusable"
        traffic.go.set()
        assert await wait_for(lambda: traffic.answered > answered + 50, 10), "traffic resumed"

        # 3. The proxy's disk is freed too: the spool works again.
        proxy_filler.unlink()
        assert await wait_for(lambda: SPOOL_RECOVERED in proxy.output(), 10)
        recovered = traffic.answered
        assert await wait_for(lambda: traffic.answered > recovered + 50, 10), "traffic flows"
        traffic.stop.set()
        traffic.go.set()
        await asyncio.wait_for(runner, 20)
        assert not traffic.bad, traffic.bad[:3]
        assert await all_counted(20) > answered

        log = proxy.output()
        assert log.count(SPOOL_FAILED) == 1 and log.count(SPOOL_RECOVERED) == 1, log[-3000:]
        # The cache's failed writes are in the sidecar's /metrics (the batches carry them).
        errors = metric_value(
            metrics_text(stack.sidecar_url), "chainproxy_cache_errors_total", op="write"
        )
        assert errors >= 1, errors
        # The cache stores again: a MISS, then HITs through ten write windows
        # (a write that failed would drop the memory's copy: a MISS again).
        xs = [(await one(stack.rpc_url(), call("chain_getBlock", [probe_hash])))[2]]
        for _ in range(5):
            await asyncio.sleep(2 * WRITE_EVERY_S)
            xs.append((await one(stack.rpc_url(), call("chain_getBlock", [probe_hash])))[2])
        assert xs == ["MISS"] + ["HIT"] * 5, xs
        assert time.monotonic() - started < 60
    finally:
        traffic.stop.set()
        traffic.go.set()
        runner.cancel()
        with contextlib.suppress(BaseException):
            await runner


async def test_a_stop_delivers_what_memory_holds_once_the_sidecar_is_back(
    disks: tuple[Stack, Path, Path],
) -> None:
    """Both disks full long enough for the proxy's delivery to back off (the
    sidecar refused every batch); the sidecar's disk is freed and the proxy is
    stopped (SIGTERM) at once, before its next try: the stop delivers the
    batches it kept in memory instead of losing them, and every call answered
    is counted once."""
    stack, proxy_dir, sidecar_dir = disks
    proxy = stack.proxy
    assert proxy is not None
    hashes = [stack.nodes[0].rpc("chain_getBlockHash", [n])["result"] for n in range(1, 200)]
    traffic = Traffic(stack.rpc_url(), hashes)
    runner = asyncio.create_task(traffic.run(workers=2))
    try:
        assert await wait_for(lambda: usage_requests(stack) > 0, 10), "no usage reached the sidecar"
        fill(proxy_dir)
        sidecar_filler = fill(sidecar_dir)
        assert await wait_for(lambda: failed_batches(stack) > 0, 10), "no ingest was refused"
        # refused for long enough that the next try is seconds away (1, 2, 4, 8 s)
        await asyncio.sleep(7)
        traffic.stop.set()
        await asyncio.wait_for(runner, 20)
        assert not traffic.bad, traffic.bad[:3]
        assert SPOOL_FAILED in proxy.output()
        sidecar_filler.unlink()
        proxy.popen.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proxy.popen.wait, 20)
    finally:
        traffic.stop.set()
        runner.cancel()
        with contextlib.suppress(BaseException):
            await runner
    log = proxy.output()
    assert "kept in memory are lost" not in log, log[-2000:]
    assert usage_requests(stack) == traffic.answered, (usage_requests(stack), traffic.answered)
