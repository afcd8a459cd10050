"""The sidecar's routing snapshot, read in the background and applied to the
addon's upstream pools. The request path only ever reads memory: with no
snapshot yet the static config list is used ("not probed"); while the sidecar
is down the last snapshot stays and the refresh backs off exponentially.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from addon.reporting.sidecar_client import SidecarError
from addon.runtime import RuntimeHolder
from addon.upstream.pool import TIER_UNPROBED, UpstreamPool

log = logging.getLogger("chainproxy.snapshot")

REFRESH_S = 1.0
MAX_BACKOFF_S = 10.0


class SnapshotError(ValueError):
    pass


def apply_snapshot(pool: UpstreamPool, doc: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """Set tier, score, best block and archive of the pool's upstreams from one
    snapshot document; upstreams it does not mention count as not probed.
    Returns (tip, finalized). Raises ``SnapshotError`` on a malformed document
    (the pool is then left as it was)."""
    try:
        if not isinstance(doc, Mapping) or not isinstance(doc.get("upstreams"), list):
            raise ValueError("not a snapshot object with an upstreams list")
        tip = _opt_int(doc.get("tip"))
        finalized = _opt_int(doc.get("finalized"))
        updates = {}
        for u in doc["upstreams"]:
            uid = u["id"]
            if uid not in pool.upstreams:
                continue  # not in our config: we have no URL for it
            tier = u["tier"]
            if isinstance(tier, bool) or not isinstance(tier, int) or not 0 <= tier <= 3:
                raise ValueError(f"bad tier {tier!r}")
            score = u.get("score", 1.0)
            if isinstance(score, bool) or not isinstance(score, int | float):
                raise ValueError(f"bad score {score!r}")
            archive = u.get("archive", False)
            if not isinstance(archive, bool):
                raise ValueError(f"bad archive flag {archive!r}")
            # A score outside 0..1 (or NaN) must not make one upstream free.
            score = min(1.0, max(0.01, score)) if score == score else 0.01
            updates[uid] = (tier, score, _opt_int(u.get("best")), archive)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SnapshotError(f"malformed routing snapshot: {e!r}") from None
    for uid, up in pool.upstreams.items():
        if uid in updates:
            up.tier, up.score, up.best, up.archive = updates[uid]
        else:
            up.tier, up.score, up.best, up.archive = TIER_UNPROBED, 1.0, None, up.configured_archive
    return tip, finalized


def _opt_int(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"not an integer: {v!r}")
    return v


class SnapshotRefresher:
    """Background task (an addon: started in ``running``, cancelled in ``done``):
    GET /api/v1/internal/routes/<network> for each network."""

    def __init__(
        self,
        holder: RuntimeHolder,
        *,
        refresh_s: float = REFRESH_S,
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        self.holder = holder
        self.refresh_s = refresh_s
        self._sleep = sleep
        self.failures = 0
        self.applied = 0
        self._task: asyncio.Task[None] | None = None

    def running(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())

    def done(self) -> None:  # synchronous: mitmproxy's hot reload calls it so
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def refresh_once(self) -> None:
        rt = self.holder.runtime
        if rt is None or rt.session is None:
            raise SnapshotError("not configured yet")
        for network, pool in rt.pools.items():
            try:
                doc = await rt.sidecar.routes(network)
            except SidecarError as e:
                raise SnapshotError(str(e)) from None
            tip, finalized = apply_snapshot(pool, doc)
            ws_rows = doc.get("ws_upstreams")  # node-wss endpoints (subscriptions)
            if isinstance(ws_rows, list) and network in rt.ws_pools:
                apply_snapshot(rt.ws_pools[network], {"upstreams": ws_rows})
            rt.chain.set_heights(network, tip, finalized)
        self.applied += 1

    async def run(self) -> None:
        delay = self.refresh_s
        while True:
            try:
                await self.refresh_once()
                if self.failures:
                    log.info("routing snapshot from the sidecar is back")
                self.failures = 0
                delay = self.refresh_s
            except asyncio.CancelledError:
                raise
            except Exception as e:  # whatever happens, the task must live on
                self.failures += 1
                if self.failures == 1 or self.failures % 10 == 0:
                    log.warning(
                        "routing snapshot unavailable (%s: %s); keeping the last one",
                        type(e).__name__,
                        str(e)[:200],
                    )
                delay = min(MAX_BACKOFF_S, max(self.refresh_s, delay * 2))
            await self._sleep(delay)
