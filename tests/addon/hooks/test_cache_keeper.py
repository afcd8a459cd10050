"""At a stop the edge cache's writes still waiting for their batch go to disk
(``CacheKeeper.done``); a config that moves the cache writes the old one's
first (``Lasting.keep_storage``)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from addon.cache.disk_keys import TRUST_S
from addon.cache.store import DiskCacheStore
from addon.hooks.holder import RuntimeHolder
from addon.hooks.keepers import CacheKeeper


def _keeper(cache: Any) -> CacheKeeper:
    holder = RuntimeHolder()
    holder.runtime = SimpleNamespace(cache=cache)  # type: ignore[assignment]
    return CacheKeeper(holder)


def test_a_stop_writes_what_waits_for_its_batch(tmp_path: Path) -> None:
    store = DiskCacheStore(tmp_path / "c", size_limit_mb=8)
    other = DiskCacheStore(tmp_path / "c", size_limit_mb=8)  # a later process

    async def scenario() -> None:
        store.set("k", {"block": 1})
        assert other.get("k") is None  # waiting for its batch
        _keeper(store).done()  # SIGTERM: mitmproxy's done, on the loop
        assert other.get("k") == {"block": 1}
        store.set("after", 2)  # a hot reload keeps the store: it still works
        store.flush()
        await store.settled()
        await asyncio.sleep(TRUST_S)  # other's filter of the disk's keys is from before it
        assert other.get("after") == 2

    asyncio.run(scenario())


def test_no_runtime_or_no_cache_is_nothing_to_do() -> None:
    CacheKeeper(RuntimeHolder()).done()
    _keeper(None).done()


def test_a_failing_close_is_logged_and_the_stop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def close(self) -> None:
            raise OSError(5, "I/O error")

    _keeper(Broken()).done()
    assert any("pending entries" in r.message for r in caplog.records if r.levelno == logging.ERROR)


def test_a_config_that_moves_the_cache_writes_the_old_one_first(tmp_path: Path) -> None:
    from addon.runtime.lasting import Lasting
    from tests.configs import endpoint, make_config

    old = make_config(endpoint("a"), data_dir=tmp_path / "one")
    new = make_config(endpoint("a"), data_dir=tmp_path / "two")
    lasting = Lasting.first(old)

    async def scenario() -> None:
        lasting.open_storage(old)
        first = lasting.cache
        assert first is not None
        first.set("k", "0x01")  # waiting for its batch
        lasting.keep_storage(new, old)
        assert lasting.cache is None  # open_storage opens the new directory's
        assert DiskCacheStore(tmp_path / "one" / "cache", size_limit_mb=8).get("k") == "0x01"

    asyncio.run(scenario())


def test_the_storage_counts_the_caches_failures_in_the_metrics(tmp_path: Path) -> None:
    from addon.reporting.live_metrics import CACHE_ERRORS
    from addon.runtime.lasting import Lasting
    from tests.configs import endpoint, make_config

    config = make_config(endpoint("a"), data_dir=tmp_path / "d")
    lasting = Lasting.first(config)
    lasting.open_storage(config)
    store = lasting.cache
    assert isinstance(store, DiskCacheStore) and store._cache is not None
    store.set("k", "0x01")  # no loop: on disk at once
    other = DiskCacheStore(tmp_path / "d" / "cache", size_limit_mb=8)
    assert other.get("k") == "0x01"

    def broken_get(*args: object, **kwargs: object) -> object:
        raise OSError(5, "Input/output error")

    store._forget_memo()  # the memory front would answer it
    store._cache.get = broken_get  # type: ignore[method-assign]
    assert store.get("k") is None  # a miss, not an error
    extra = lasting.metrics.drain({})["extra"]
    assert [CACHE_ERRORS, {"op": "read"}, 1] in [list(e) for e in extra]
