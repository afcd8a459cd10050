"""The edge cache on a full disk (a real tmpfs filled up): a write that fails is a
miss, logged once, and a cache opened on a full disk is kept, not set aside."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from addon.cache.store import DiskCacheStore
from tests.addon.helpers import (
    log_lines,
)
from tests.tmpfs import fill


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
    assert log_lines(caplog, "treated as a miss until it works again") == 1
    filler.unlink()
    store.set("new", {"block": 2})
    assert store.get("new") == {"block": 2}
    assert log_lines(caplog, "cache works again") == 1
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
    assert log_lines(caplog, "cache open failed") == 1
    filler.unlink()
    assert store.get("old") == {"block": 0}  # opened now, the old entries intact
    store.set("new", {"block": 1})
    assert store.get("new") == {"block": 1}
    store.close()
