"""A node a cross-check quarantined leaves the edge cache: every entry it
answered, not only the one that was checked (``addon/upstream/cross_check.py``
calls ``NodePurges.start``). Its answers that were never sampled are as
suspect as the one that was caught.

The shared tier (Redis) goes first, then the local one (memory and the
machine's disk): a proxy filling its local tier from Redis meanwhile brings
the copy in before the local purge, never after it. Counted in
``chainproxy_cache_purged_total{network, tier}`` and logged. In the
background: the check that quarantined the node is not held up, and a node
that filled many entries takes the time it takes (a disk purge runs in a
thread).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from addon.cache.redis_tier import SharedCacheTier
from addon.cache.store import CacheStore

log = logging.getLogger("chainproxy.cache")


class Counter(Protocol):
    def __call__(self, network: str, tier: str, n: int) -> None: ...


class NodePurges:
    """Purges in flight (kept until they end)."""

    def __init__(self, count: Counter) -> None:
        self.count = count
        self._tasks: set[asyncio.Task[None]] = set()

    def start(
        self,
        network: str,
        endpoint: str,
        local: CacheStore | None,
        shared: SharedCacheTier | None,
    ) -> None:
        task = asyncio.ensure_future(self.purge(network, endpoint, local, shared))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def purge(
        self,
        network: str,
        endpoint: str,
        local: CacheStore | None,
        shared: SharedCacheTier | None,
    ) -> None:
        try:
            in_shared = 0 if shared is None else await shared.purge(endpoint)
            in_local = 0 if local is None else await local.purge(endpoint)
        except asyncio.CancelledError:
            raise
        except Exception:  # never the clients' problem; the entries expire or age out
            log.exception("%s: purging the cache entries of upstream %s failed", network, endpoint)
            return
        self.count(network, "local", in_local)
        if shared is not None:
            self.count(network, "shared", in_shared)
        log.warning(
            "%s: upstream %s quarantined: the cache entries it answered purged "
            "(%d local, %d shared)",
            network,
            endpoint,
            in_local,
            in_shared,
        )
