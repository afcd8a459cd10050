"""The sidecar's routing snapshot, read in the background and applied to the
addon's upstream pools (``addon/upstream/snapshot.py``). The request path only
ever reads memory: with no snapshot yet the static config list is used ("not
probed"); while the sidecar is down the last snapshot stays and the refresh
backs off exponentially.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from addon.hooks.holder import RuntimeHolder
from addon.reporting.sidecar_client import SidecarError
from addon.upstream.snapshot import SnapshotError, apply_snapshot

log = logging.getLogger("chainproxy.snapshot")

REFRESH_S = 1.0
MAX_BACKOFF_S = 10.0


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
            rt.chain.set_heights(network, tip, finalized, at=rt.clock())
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
