"""A quarantined node's cache entries purged from both tiers, counted."""

from __future__ import annotations

from typing import Any

from addon.cache.memory_store import MemoryStore
from addon.cache.purge import NodePurges


class Shared:
    """The shared tier as the purge sees it."""

    def __init__(self, held: int, fail: bool = False) -> None:
        self.held, self.fail = held, fail

    async def purge(self, filler: str) -> int:
        if self.fail:
            raise OSError("boom")
        return self.held


async def test_a_purge_counts_each_tier() -> None:
    counted: list[tuple[str, str, int]] = []
    purges = NodePurges(lambda net, tier, n: counted.append((net, tier, n)))
    local = MemoryStore()
    local.set("k1", 1, "liar")
    local.set("k2", 2, "liar")
    local.set("k3", 3, "honest")
    shared: Any = Shared(held=5)
    await purges.purge("finney", "liar", local, shared)
    assert local.data == {"k3": 3}
    assert counted == [("finney", "local", 2), ("finney", "shared", 5)]
    counted.clear()
    await purges.purge("finney", "liar", local, None)  # no Redis: one tier
    assert counted == [("finney", "local", 0)]


async def test_a_purge_that_fails_is_logged_never_raised(caplog: Any) -> None:
    counted: list[Any] = []
    purges = NodePurges(lambda net, tier, n: counted.append(n))
    shared: Any = Shared(held=0, fail=True)
    await purges.purge("finney", "liar", MemoryStore(), shared)
    assert counted == [] and "purging the cache entries of upstream liar failed" in caplog.text
