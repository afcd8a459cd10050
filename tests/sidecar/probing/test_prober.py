"""The probe scheduler (probe rounds, head tracking, health status) with a fake
probe function, tiny intervals and the real event loop: every endpoint is
probed, head tracking only for node endpoints, bounded concurrency, and neither
a hung nor a crashing probe stops the others."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from common.config import Config, Endpoint, ProbeConfig, parse_config
from sidecar.probing import prober as prober_module
from sidecar.probing.health import Health
from sidecar.probing.prober import Prober
from sidecar.probing.results import DEAD, LIVE, TIMEOUT, ProbeKind, ProbeResult
from sidecar.probing.store import Store

FAST = ProbeConfig(
    interval_s=0.05, head_interval_s=0.02, timeout_s=1, fail_threshold=2, recover_threshold=2
)


class LowRng:
    """Deterministic jitter: always the low end, so the first full round starts at once."""

    def uniform(self, a: float, b: float) -> float:
        return a


def config(*kinds: tuple[str, str]) -> Config:
    """(provider, kind) pairs -> a config with one endpoint each."""
    scheme = {"node-rpc": "https", "node-wss": "wss", "data-artifact": "https", "sse": "https"}
    return parse_config(
        {
            "registry": {
                "endpoints": [
                    {
                        "url": f"{scheme[kind]}://{name}.example.org",
                        "provider": name,
                        "kind": kind,
                        "network": "finney",
                    }
                    for name, kind in kinds
                ]
            }
        },
        env={},
    )


class FakeProbe:
    """Behaviour per provider: "live" (default), "dead", "hang" (awaits forever) or
    "raise" (a bug in the probe code). Records calls and the peak concurrency."""

    def __init__(self, modes: dict[str, str] | None = None, delay: float = 0.0) -> None:
        self.modes = modes or {}
        self.delay = delay
        self.calls: list[tuple[str, ProbeKind]] = []
        self.inflight = 0
        self.max_inflight = 0
        self.cancelled: list[str] = []

    def count(self, provider: str, kind: ProbeKind | None = None) -> int:
        return sum(1 for p, k in self.calls if p == provider and (kind is None or k == kind))

    async def __call__(self, e: Endpoint, kind: ProbeKind) -> ProbeResult:
        self.calls.append((e.provider, kind))
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            mode = self.modes.get(e.provider, "live")
            if mode == "hang":
                await asyncio.Event().wait()
            if self.delay:
                await asyncio.sleep(self.delay)
            if mode == "raise":
                raise RuntimeError("bug in the probe code")
            if mode == "dead":
                return ProbeResult(e.id, time.time(), kind, DEAD)
            return ProbeResult(e.id, time.time(), kind, LIVE, 12, best=100, finalized=98)
        except asyncio.CancelledError:
            self.cancelled.append(e.provider)
            raise
        finally:
            self.inflight -= 1


def prober(
    cfg: Config,
    probe: FakeProbe,
    *,
    store: Store | None = None,
    probe_config: ProbeConfig = FAST,
    concurrency: int = 32,
    clock: Any = time.monotonic,
    **kw: Any,
) -> Prober:
    return Prober(
        cfg.endpoints,
        probe,
        probe_config,
        store,
        clock=clock,
        concurrency=concurrency,
        rng=LowRng(),  # type: ignore[arg-type]
        **kw,
    )


# --- observe ------------------------------------------------------------------------------


def test_observe_folds_results_and_reports_transitions() -> None:
    cfg = config(("a", "node-rpc"))
    (e,) = cfg.endpoints
    seen: list[tuple[str, str, str | None, str]] = []
    p = prober(
        cfg,
        FakeProbe(),
        on_transition=lambda ep, h, t, r: seen.append((ep.id, h.status, t, r.classification)),
    )
    assert p.health_of(e.id).status == "Unknown"

    def result(classification: str, at: float) -> ProbeResult:
        return ProbeResult(e.id, at, "full", classification, 10 if classification == LIVE else None)

    assert p.observe(e, result(LIVE, 1)) is None
    assert p.health_of(e.id).status == "OK"
    assert p.observe(e, result(TIMEOUT, 2)) is None
    assert p.observe(e, result(TIMEOUT, 3)) == "degraded"
    assert p.health_of(e.id).status == "Degraded"
    assert p.observe(e, result(LIVE, 4)) is None  # flap damping: one success is not enough
    assert p.observe(e, result(LIVE, 5)) == "recovered"
    assert seen == [(e.id, "Degraded", "degraded", TIMEOUT), (e.id, "OK", "recovered", LIVE)]
    assert p.probes_run == 5
    assert [r.at for r in p.recent[e.id]] == [1, 2, 3, 4, 5]
    assert p.changed.is_set()


def test_observe_without_a_hook_still_tracks_health() -> None:
    cfg = config(("a", "node-rpc"))
    (e,) = cfg.endpoints
    p = prober(cfg, FakeProbe())
    for at in (1.0, 2.0):
        p.observe(e, ProbeResult(e.id, at, "full", DEAD))
    assert p.health_of(e.id).status == "Degraded"
    assert p.health_of(e.id).message == DEAD


# --- run ----------------------------------------------------------------------------------
#
# Waits are "until the condition holds, at most 2 s": a test passes as soon as
# the scheduler has done what is asked, so none relies on exact timing.


async def until(cond: Callable[[], bool], timeout: float = 2.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


@contextlib.asynccontextmanager
async def running(p: Prober) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(p.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_every_endpoint_is_probed_and_heads_only_for_nodes() -> None:
    cfg = config(("rpc", "node-rpc"), ("wss", "node-wss"), ("art", "data-artifact"), ("ev", "sse"))
    fake = FakeProbe()
    p = prober(cfg, fake)
    async with running(p):
        assert await until(
            lambda: (
                all(fake.count(n, "full") >= 2 for n in ("rpc", "wss", "art", "ev"))
                and all(fake.count(n, "head") >= 2 for n in ("rpc", "wss"))
            )
        ), fake.calls
    assert fake.count("art", "head") == 0 and fake.count("ev", "head") == 0
    assert {e.id for e in cfg.endpoints} == set(p.health)
    assert all(h.status == "OK" and h.best == 100 for h in p.health.values())
    assert p.probes_run == len(fake.calls)


async def test_full_probes_follow_interval_s() -> None:
    cfg = config(("art", "data-artifact"))
    fake = FakeProbe()
    p = prober(cfg, fake, probe_config=ProbeConfig(interval_s=0.1, head_interval_s=0.02))
    async with running(p):
        await asyncio.sleep(0.45)
    # t = 0, ~0.09, ~0.18, ~0.27, ~0.36 (jitter -10%): neither a busy loop nor stalled.
    assert 3 <= fake.count("art", "full") <= 6


async def test_full_probes_are_not_a_busy_loop() -> None:
    cfg = config(("art", "data-artifact"), ("rpc", "node-rpc"))
    fake = FakeProbe()
    p = prober(cfg, fake, probe_config=ProbeConfig(interval_s=0.1, head_interval_s=0.05))
    async with running(p):
        await asyncio.sleep(0.5)
    assert fake.count("art", "full") <= 6
    assert fake.count("rpc", "head") <= 11


async def test_dead_endpoint_becomes_degraded_and_others_stay_ok() -> None:
    cfg = config(("good", "node-rpc"), ("bad", "node-rpc"))
    transitions: list[tuple[str, str | None]] = []
    p = prober(
        cfg,
        FakeProbe({"bad": "dead"}),
        on_transition=lambda e, h, t, r: transitions.append((e.provider, t)),
    )
    good, bad = cfg.endpoints
    async with running(p):
        assert await until(lambda: p.health_of(bad.id).consecutive_failures >= 4)
    assert p.health_of(good.id).status == "OK"
    assert p.health_of(bad.id).status == "Degraded"
    assert p.health_of(bad.id).message == DEAD
    assert transitions == [("bad", "degraded")]  # once, not on every failed probe


async def test_never_more_than_concurrency_probes_at_once() -> None:
    cfg = config(*((f"n{i}", "node-rpc") for i in range(8)))
    fake = FakeProbe(delay=0.03)
    p = prober(cfg, fake, concurrency=3)
    async with running(p):
        assert await until(lambda: all(fake.count(f"n{i}") >= 2 for i in range(8)))
    assert fake.max_inflight == 3  # the limit is used, and never exceeded


async def test_a_hanging_probe_does_not_stop_other_endpoints() -> None:
    cfg = config(("stuck", "node-rpc"), ("b", "node-rpc"), ("c", "data-artifact"))
    fake = FakeProbe({"stuck": "hang"})
    p = prober(cfg, fake, concurrency=8)
    async with running(p):
        assert await until(
            lambda: (
                fake.count("b", "full") >= 3
                and fake.count("b", "head") >= 3
                and fake.count("c", "full") >= 3
            )
        ), fake.calls
    assert fake.count("stuck") >= 1
    assert p.health_of(cfg.endpoints[1].id).status == "OK"


async def test_a_hanging_endpoint_does_not_use_up_the_concurrency_slots() -> None:
    cfg = config(("stuck", "node-rpc"), ("b", "node-rpc"))
    fake = FakeProbe({"stuck": "hang"})
    cfg_probe = ProbeConfig(interval_s=0.05, head_interval_s=0.02, timeout_s=0.05)
    p = prober(cfg, fake, concurrency=2, probe_config=cfg_probe)
    async with running(p):
        assert await until(lambda: fake.count("b") >= 4, timeout=1.2), fake.calls


async def test_a_hanging_endpoint_is_reported_as_timing_out() -> None:
    cfg = config(("stuck", "node-rpc"), ("b", "node-rpc"))
    fake = FakeProbe({"stuck": "hang"})
    cfg_probe = ProbeConfig(interval_s=0.05, head_interval_s=0.02, timeout_s=0.05, fail_threshold=2)
    p = prober(cfg, fake, probe_config=cfg_probe)
    stuck = cfg.endpoints[0]
    async with running(p):
        assert await until(lambda: p.health_of(stuck.id).status == "Degraded", timeout=1.2)
    assert p.health_of(stuck.id).classification == TIMEOUT


async def test_a_probe_that_raises_does_not_stop_probing() -> None:
    cfg = config(("buggy", "node-rpc"), ("fine", "node-rpc"))
    fake = FakeProbe({"buggy": "raise"})
    p = prober(cfg, fake)
    async with running(p) as task:
        assert await until(
            lambda: (
                fake.count("buggy", "full") >= 2
                and fake.count("buggy", "head") >= 2
                and fake.count("fine") >= 4
            )
        ), fake.calls
        assert not task.done()
    assert p.health_of(cfg.endpoints[1].id).status == "OK"
    # A probe bug counts as a failed probe: the endpoint does not keep a stale "OK".
    buggy = p.health_of(cfg.endpoints[0].id)
    assert buggy.classification == "probe-error" and buggy.status == "Degraded"


async def test_cancelling_run_cancels_probes_and_flushes_to_the_store(tmp_path: Path) -> None:
    cfg = config(("stuck", "node-rpc"), ("a", "node-rpc"), ("d", "node-rpc"))
    fake = FakeProbe({"stuck": "hang", "d": "dead"})
    store = Store(tmp_path / "s.sqlite3")
    a, d = cfg.endpoints[1].id, cfg.endpoints[2].id
    try:
        p = prober(cfg, fake, store=store)
        async with running(p):
            assert await until(lambda: p.health_of(d).status == "Degraded", timeout=0.9)
        assert "stuck" in fake.cancelled  # in-flight probes do not outlive the scheduler
        assert fake.inflight == 0
        assert store.probe_count() == p.probes_run > 0
        assert store.load_health() == p.health
        assert store.load_health()[d].status == "Degraded"
        assert len(store.recent_probes(a)) >= 2
    finally:
        store.close()


async def test_run_flushes_periodically_while_running(tmp_path: Path) -> None:
    cfg = config(("a", "node-rpc"))
    store = Store(tmp_path / "s.sqlite3")
    try:
        p = prober(cfg, FakeProbe(), store=store)
        async with running(p):
            # A crash would lose at most about the last second of results.
            assert await until(lambda: store.probe_count() > 0, timeout=1.8)
            assert store.load_health()[cfg.endpoints[0].id].status == "OK"
    finally:
        store.close()


def test_a_prober_over_an_existing_store_starts_from_the_stored_health(tmp_path: Path) -> None:
    cfg = config(("a", "node-rpc"), ("b", "node-rpc"))
    a, b = cfg.endpoints
    path = tmp_path / "s.sqlite3"
    first = Store(path)
    p1 = prober(cfg, FakeProbe(), store=first)
    for at in (1.0, 2.0, 3.0):
        p1.observe(a, ProbeResult(a.id, at, "full", LIVE, 10, best=100))
    p1.observe(a, ProbeResult(a.id, 4.0, "full", DEAD))
    p1.observe(a, ProbeResult(a.id, 5.0, "full", DEAD))
    p1.flush()
    gone = "endpoint-srf-ffffffffffffffff"  # removed from the config since
    first.record([], {gone: Health(status="OK")}, 6.0)
    first.close()

    second = Store(path)
    try:
        p2 = prober(cfg, FakeProbe(), store=second)
        h = p2.health_of(a.id)
        assert h == p1.health_of(a.id)
        assert h.status == "Degraded" and h.best == 100
        assert gone not in p2.health
        assert p2.health_of(b.id).status == "Unknown"
        assert [r.at for r in p2.recent[a.id]] == [1.0, 2.0, 3.0, 4.0, 5.0]  # oldest first
        # Flap damping carries over: one success after the restart is not a recovery.
        assert p2.observe(a, ProbeResult(a.id, 6.0, "full", LIVE, 10)) is None
        assert p2.health_of(a.id).status == "Degraded"
        assert p2.observe(a, ProbeResult(a.id, 7.0, "full", LIVE, 10)) == "recovered"
    finally:
        second.close()


async def test_a_wall_clock_step_backwards_does_not_stop_probing() -> None:
    cfg = config(("a", "node-rpc"))
    fake = FakeProbe()
    offset = [0.0]
    p = prober(cfg, fake, clock=lambda: time.time() + offset[0])
    async with running(p):
        assert await until(lambda: len(fake.calls) >= 2)
        offset[0] = -3600.0  # the system clock is corrected by an hour
        before = len(fake.calls)
        assert await until(lambda: len(fake.calls) >= before + 4, timeout=1.2), fake.calls


def test_a_wrong_chain_node_turns_degraded_although_head_probes_look_live() -> None:
    cfg = config(("w", "node-rpc"))
    (e,) = cfg.endpoints
    p = prober(cfg, FakeProbe())
    p.observe(e, ProbeResult(e.id, 1.0, "full", LIVE, 10, best=5))
    p.observe(e, ProbeResult(e.id, 2.0, "full", "wrong-chain", 10, best=5))
    assert p.observe(e, ProbeResult(e.id, 3.0, "head", LIVE, 10, best=6)) == "degraded"
    h = p.health_of(e.id)
    assert h.status == "Degraded" and h.classification == "wrong-chain"
    # a head probe that fails keeps the verdict too (its own reason cleared
    # it, and the proxy took the node for a last resort again)
    p.observe(e, ProbeResult(e.id, 3.5, "head", "timeout", 10))
    assert p.health_of(e.id).classification == "wrong-chain"
    p.observe(e, ProbeResult(e.id, 4.0, "full", LIVE, 10, best=7))  # back on the right chain
    assert p.observe(e, ProbeResult(e.id, 5.0, "head", LIVE, 10, best=7)) == "recovered"


# --- an endpoint that has never answered ---------------------------------------------------

MINUTE = ProbeConfig(interval_s=60, head_interval_s=60, timeout_s=1)


async def test_a_failed_first_probe_is_tried_again_soon_not_after_the_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A first probe that times out while everything starts (a loaded machine)
    left the endpoint unknown, without a height, for the whole interval (the
    pin-fallback e2e's minute); it is probed again at once."""
    monkeypatch.setattr(prober_module, "FIRST_RETRY_S", 0.02, raising=False)
    cfg = config(("slow-start", "node-rpc"))
    (e,) = cfg.endpoints
    fake = FakeProbe({"slow-start": "dead"})
    p = prober(cfg, fake, probe_config=MINUTE)
    async with running(p):
        assert await until(lambda: fake.count("slow-start") >= 1)
        fake.modes.clear()  # the node answers from now on
        assert await until(lambda: p.health_of(e.id).best == 100, timeout=5), fake.calls
    assert p.health_of(e.id).status == "OK"
    assert fake.count("slow-start", "head") == 0  # the full probe again, not the head's turn


def test_the_retries_back_off_to_the_interval_and_end_once_it_answered() -> None:
    cfg = config(("n", "node-rpc"))
    (e,) = cfg.endpoints
    p = prober(cfg, FakeProbe(), probe_config=MINUTE)
    assert p._next_delay(e.id, 60) == 60  # not probed yet: the schedule's own
    delays = []
    for at in range(1, 10):
        p.observe(e, ProbeResult(e.id, at, "full", DEAD))
        delays.append(p._next_delay(e.id, 60))
    first = prober_module.FIRST_RETRY_S
    assert delays[:3] == [first, 2 * first, 4 * first]
    assert delays == sorted(delays) and delays[-1] == 60  # never beyond the interval
    # Once it has answered, a failed probe waits the interval: flap damping counts
    # probes, and its pace is the operator's.
    p.observe(e, ProbeResult(e.id, 10, "full", LIVE, 10, best=1))
    p.observe(e, ProbeResult(e.id, 11, "full", DEAD))
    assert p._next_delay(e.id, 60) == 60


# --- state horizons -----------------------------------------------------------------------


class FakeState:
    """A node keeping the state of its last ``keep`` blocks (best 100_000, the
    fake probe's best is 100); records the blocks each round asked."""

    def __init__(self, keep: int, *, fail: bool = False) -> None:
        self.keep = keep
        self.fail = fail
        self.asked: list[tuple[str, tuple[int, ...]]] = []

    async def __call__(self, e: Endpoint, blocks: tuple[int, ...]) -> tuple[tuple[int, bool], ...]:
        self.asked.append((e.provider, blocks))
        if self.fail:
            raise RuntimeError("bug in the state checks")
        return tuple((n, 100 - n < self.keep) for n in blocks)


class ArchiveProbe(FakeProbe):
    """Full probes report the archive check: block 1's state held or not."""

    def __init__(self, archive: dict[str, bool]) -> None:
        super().__init__()
        self.archive = archive

    async def __call__(self, e: Endpoint, kind: ProbeKind) -> ProbeResult:
        result = await super().__call__(e, kind)
        if kind != "full":
            return result
        return dataclasses.replace(result, archive=self.archive.get(e.provider))


async def test_full_probes_of_nodes_check_the_state_and_narrow_the_horizon(tmp_path: Path) -> None:
    cfg = config(("pruned", "node-rpc"), ("arch", "node-wss"), ("art", "data-artifact"))
    state = FakeState(keep=20)
    store = Store(tmp_path / "s.sqlite3")
    p = prober(cfg, ArchiveProbe({"pruned": False, "arch": True}), store=store, state_probe=state)
    pruned, arch, _ = cfg.endpoints
    async with running(p):
        assert await until(lambda: p.health_of(pruned.id).horizon.window.exact, 5.0), p.health
    h = p.health_of(pruned.id)
    assert h.horizon.earliest(100) == 81 and h.horizon.latest_lost(100) == 80
    assert p.health_of(arch.id).horizon.earliest(100) == 0  # block 1 held: no other check
    assert {who for who, _ in state.asked} == {"pruned"}  # neither the archive nor the artifact
    assert all(len(blocks) <= 2 for _, blocks in state.asked)
    # kept across a restart
    assert (
        Prober(cfg.endpoints, FakeProbe(), FAST, store, clock=time.time)
        .health_of(pruned.id)
        .horizon
        == p.health_of(pruned.id).horizon
    )
    store.close()


async def test_a_reported_block_is_checked_at_the_next_full_probe() -> None:
    cfg = config(("pruned", "node-rpc"))
    state = FakeState(keep=20)
    p = prober(cfg, ArchiveProbe({"pruned": False}), state_probe=state, reported=lambda eid: 90)
    async with running(p):
        assert await until(lambda: len(state.asked) >= 2)
    assert all(blocks[0] == 90 for _, blocks in state.asked[:1])


async def test_failing_state_checks_leave_the_horizon_to_the_archive_check() -> None:
    cfg = config(("pruned", "node-rpc"))
    (e,) = cfg.endpoints
    state = FakeState(keep=20, fail=True)
    p = prober(cfg, ArchiveProbe({"pruned": False}), state_probe=state)
    async with running(p):
        assert await until(lambda: len(state.asked) >= 2 and p.health_of(e.id).status == "OK")
    h = p.health_of(e.id).horizon
    assert h.archive is False and h.earliest(100) is None and h.latest_lost(100) == 1
