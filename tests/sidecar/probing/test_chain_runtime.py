"""Each network's runtime and its upgrades, from the head probes' readings
(``sidecar.probing.chain_runtime``): which readings count, the upgrade seen once
with its log line, narrowed by a node a block behind, never undone by a stale
node, and kept across a restart in the probe store's SQLite."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from common.config import Config, Endpoint, parse_config
from sidecar.probing.chain_runtime import (
    ChainRuntimeBook,
    RuntimeVersion,
    counts,
    from_json,
    to_json,
)
from sidecar.probing.health import Health
from sidecar.probing.prober import Prober
from sidecar.probing.results import LIVE, ProbeResult
from sidecar.probing.store import Store
from tests.fakes import FakeClock

OLD = RuntimeVersion("node-subtensor", 300)
NEW = RuntimeVersion("node-subtensor", 301)
T0 = 1_800_000_000.0


def make_config(max_lag: int = 3) -> Config:
    endpoints = [
        {"url": f"http://127.0.0.1:{i}", "provider": p, "kind": "node-rpc", "network": "finney"}
        for i, p in ((1, "a"), (2, "b"), (3, "c"))
    ]
    endpoints.append(
        {
            "url": "https://data.example/x",
            "provider": "d",
            "kind": "data-artifact",
            "network": "finney",
        }
    )
    return parse_config(
        {
            "networks": {"finney": {"max_lag_blocks": max_lag}, "test": {}},
            "registry": {"endpoints": endpoints},
        },
        env={},
    )


def head(e: Endpoint, best: int, spec: int | None, at: float = T0, **kw: object) -> ProbeResult:
    name = None if spec is None else "node-subtensor"
    return ProbeResult(
        e.id, at, "head", kw.pop("c", LIVE), 10, best, best - 2, None, "", name, spec
    )  # type: ignore[arg-type]


def test_the_first_reading_sets_the_runtime_and_another_one_later_is_an_upgrade(
    caplog: pytest.LogCaptureFixture,
) -> None:
    book = ChainRuntimeBook(make_config())
    caplog.set_level(logging.INFO, "chainproxy.sidecar.runtime")
    assert book.see("finney", 100, OLD, T0) is None
    state = book.get("finney")
    assert state is not None and (state.runtime, state.since_block, state.seen_block) == (
        OLD,
        None,
        100,
    )
    assert book.see("finney", 101, OLD, T0 + 12) is None
    up = book.see("finney", 102, NEW, T0 + 24)
    assert up is not None and (up.old, up.new, up.block, up.after_block) == (OLD, NEW, 102, 101)
    assert book.upgrades == {"finney": 1, "test": 0}
    state = book.get("finney")
    assert state is not None and (state.runtime, state.since_block, state.last_upgrade) == (
        NEW,
        102,
        up,
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["finney: runtime upgrade 300 -> 301 at block 102"]
    # once: more readings of the new runtime, a stale node's old one, change nothing
    assert book.see("finney", 103, NEW, T0 + 36) is None
    assert book.see("finney", 104, OLD, T0 + 48) is None  # a spec version never goes back
    assert book.upgrades["finney"] == 1 and book.get("finney").runtime == NEW  # type: ignore[union-attr]


def test_a_wide_window_is_said_and_narrowed_by_nodes_behind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    book = ChainRuntimeBook(make_config())
    book.see("finney", 100, OLD, T0)
    caplog.set_level(logging.WARNING, "chainproxy.sidecar.runtime")
    up = book.see("finney", 105, NEW, T0 + 60)  # the probes missed blocks 101..104
    assert up is not None and (up.block, up.after_block) == (105, 100)
    assert caplog.messages == [
        "finney: runtime upgrade 300 -> 301 at block 105 (on 300 at block 100)"
    ]
    book.see("finney", 102, OLD, T0 + 61)  # a node a block or three behind
    book.see("finney", 104, NEW, T0 + 62)
    book.see("finney", 99, OLD, T0 + 63)  # outside the window: nothing to learn
    last = book.get("finney").last_upgrade  # type: ignore[union-attr]
    assert last is not None and (last.block, last.after_block) == (104, 102)
    assert book.get("finney").since_block == 104  # type: ignore[union-attr]
    assert book.upgrades["finney"] == 1


def test_a_second_upgrade_and_names_that_change() -> None:
    book = ChainRuntimeBook(make_config())
    book.see("finney", 10, OLD, T0)
    book.see("finney", 11, NEW, T0)
    other = RuntimeVersion("other-runtime", 400)
    up = book.see("finney", 20, other, T0)
    assert up is not None and (up.old, up.new, up.after_block) == (NEW, other, 11)
    assert book.see("finney", 12, OLD, T0) is None  # older than the last upgrade's window
    assert book.upgrades["finney"] == 2


def test_only_live_healthy_synced_node_readings_count() -> None:
    config = make_config(max_lag=3)
    a, b, c, d = config.endpoints
    ok = Health(status="OK", best=100)
    health = {
        a.id: ok,
        b.id: Health(status="OK", best=96),
        c.id: Health(status="Degraded", best=200),
    }
    assert counts(a, head(a, 100, 301), health, config)
    assert not counts(b, head(b, 96, 301), health, config)  # 4 behind the tip (100)
    assert not counts(c, head(c, 200, 301), health, config)  # not healthy: not the tip either
    assert not counts(a, head(a, 100, None), health, config)  # no runtime read
    assert not counts(a, head(a, 100, 301, c="timeout"), health, config)
    assert not counts(d, head(d, 100, 301), {**health, d.id: ok}, config)  # not a node
    assert not counts(a, head(a, 100, 301), {}, config)  # not probed into health yet


def test_the_prober_feeds_the_book() -> None:
    config = make_config()
    a, b, *_ = config.endpoints
    book = ChainRuntimeBook(config)

    async def never(e: Endpoint, kind: str) -> ProbeResult:
        raise AssertionError

    prober = Prober(
        config.endpoints, never, config.probe, None, clock=lambda: T0, chain_runtimes=book
    )
    prober.observe(a, head(a, 100, 300))
    prober.observe(b, head(b, 100, 300))
    prober.observe(a, head(a, 101, 301))
    prober.observe(b, head(b, 95, 300))  # lagging: ignored
    state = book.get("finney")
    assert state is not None and state.runtime == NEW and book.upgrades["finney"] == 1


def test_the_runtime_and_last_upgrade_survive_a_restart(tmp_path: Path) -> None:
    config, clock = make_config(), FakeClock(T0)
    store = Store(tmp_path / "sidecar.sqlite3")
    book = ChainRuntimeBook(config, store, clock)
    book.see("finney", 100, OLD, T0)
    up = book.see("finney", 101, NEW, T0 + 12)
    store.close()

    store = Store(tmp_path / "sidecar.sqlite3")
    again = ChainRuntimeBook(config, store, clock)
    state = again.get("finney")
    assert state is not None and state.runtime == NEW and state.last_upgrade == up
    assert again.upgrades["finney"] == 0  # the counter is the process's
    assert again.see("finney", 150, NEW, T0 + 600) is None
    # an upgrade while the sidecar was down is seen at the first reading after
    up2 = again.see("finney", 400, RuntimeVersion("node-subtensor", 302), T0 + 4000)
    assert up2 is not None and (up2.old, up2.after_block) == (NEW, 150)
    store.close()


def test_the_highest_block_seen_is_written_at_most_once_a_minute(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    store = Store(tmp_path / "s.sqlite3")
    book = ChainRuntimeBook(make_config(), store, clock)
    book.see("finney", 100, OLD, T0)
    clock.advance(10)
    book.see("finney", 101, OLD, T0)
    assert json.loads(store.load_runtimes()["finney"])["seen_block"] == 100
    clock.advance(60)
    book.see("finney", 107, OLD, T0)
    assert json.loads(store.load_runtimes()["finney"])["seen_block"] == 107
    store.close()


def test_a_remembered_runtime_of_another_chain_is_replaced_not_counted(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    book = ChainRuntimeBook(make_config(), store)
    book.see("finney", 5_000_000, NEW, T0)
    store.close()
    store = Store(tmp_path / "s.sqlite3")
    book = ChainRuntimeBook(make_config(), store)
    assert book.see("finney", 1000, OLD, T0) is None  # a fresh chain, far lower
    state = book.get("finney")
    assert state is not None and state.runtime == OLD and book.upgrades["finney"] == 0
    assert book.see("finney", 900, NEW, T0) is None  # now it is this chain's: ignored
    assert book.get("finney").runtime == OLD  # type: ignore[union-attr]
    store.close()


def test_unreadable_rows_are_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = Store(tmp_path / "s.sqlite3")
    store.save_runtime("finney", "{not json")
    store.save_runtime("test", json.dumps({"runtime": {"spec_name": "x", "spec_version": -1}}))
    store.save_runtime(
        "mars", json.dumps(to_json(ChainRuntimeBook(make_config()).get("x") or _state()))
    )
    book = ChainRuntimeBook(make_config(), store)
    assert book.get("finney") is None and book.get("test") is None and book.get("mars") is None
    assert sum("unreadable runtime row" in m for m in caplog.messages) == 2
    store.close()


def _state():  # type: ignore[no-untyped-def]
    book = ChainRuntimeBook(make_config())
    book.see("finney", 1, OLD, T0)
    book.see("finney", 2, NEW, T0)
    return book.get("finney")


def test_the_stored_form_round_trips_and_is_checked() -> None:
    state = _state()
    assert from_json(json.loads(json.dumps(to_json(state)))) == state
    for bad in (
        [],
        {**to_json(state), "seen_block": True},
        {**to_json(state), "seen_at": "soon"},
        {**to_json(state), "runtime": {"spec_name": 1, "spec_version": 2}},
        {**to_json(state), "last_upgrade": {"old": None}},
        {**to_json(state), "last_upgrade": 5},
    ):
        with pytest.raises((ValueError, TypeError, KeyError)):
            from_json(bad)
