"""The usage shipper's life as an addon: started when mitmproxy runs, and at a
graceful stop or reload the records not yet sent are drained into the on-disk
spool synchronously (delivered after the restart). If the spool cannot take
them (a full disk), a drained stop (SIGTERM) first offers them to the sidecar
once more (``before_stop``); what still stays in memory is lost with the
process: logged.
Batches go out through the current runtime's sidecar client, so a reload
that changes ``sidecar.token`` does not leave them failing with 401."""

from __future__ import annotations

import asyncio
from typing import Any

from addon.hooks.holder import RuntimeHolder
from addon.mitm import responses as mitm_responses
from addon.mitm import versions as mitm_versions
from addon.reporting.usage import UsageShipper


class ShipperAddon:
    def __init__(self, holder: RuntimeHolder) -> None:
        self.holder = holder
        self.shipper: UsageShipper | None = None
        self._task: asyncio.Task[None] | None = None

    def running(self) -> None:
        rt = self.holder.runtime
        if self._task is not None or rt is None or rt.spool is None:
            return
        self.shipper = UsageShipper(
            rt.usage,
            rt.spool,
            self._post,
            flush_s=rt.config.proxy.usage.flush_s,
            memory_max_batches=rt.config.proxy.usage.memory_max_batches,
            metrics=rt.metrics,
            gauges=self._gauges,
        )
        self._task = asyncio.get_running_loop().create_task(self.shipper.run())

    async def _post(self, batch: dict[str, Any]) -> bool:
        """Through the sidecar client of the config in force: a reload that
        changes ``sidecar.token`` (or its URL) applies to the next batch."""
        rt = self.holder.runtime
        return await rt.sidecar.post_usage(batch) if rt is not None else False

    def _gauges(self) -> dict[str, object]:
        """Read as each batch is built: the settings of the config in force
        (a reload's ``proxy.usage``) and the counts refused below the addon."""
        rt = self.holder.runtime  # the current one: a config reload replaces it
        if rt is not None:
            self._follow(rt)
        gauges = rt.gauges() if rt is not None else {}
        off = mitm_versions.mechanisms_off()  # an untested mitmproxy an operator accepted
        return {**gauges, "mechanisms_off": off} if off else gauges

    def _follow(self, rt: Any) -> None:
        usage = rt.config.proxy.usage
        if self.shipper is not None:
            self.shipper.flush_s = usage.flush_s  # from the next wait on
            self.shipper.backlog.max_batches = usage.memory_max_batches
        if rt.spool is not None:
            rt.spool.max_batches = usage.spool_max_batches
        for n in mitm_responses.take_refused().values():
            rt.metrics.count_refusal("request", n)  # a body, head or slow request refused

    async def before_stop(self, timeout_s: float) -> None:
        """The drain's last step (addon/hooks/drain.py): what the spool could
        not take goes to the sidecar now if it takes it; ``done`` follows."""
        if self.shipper is not None:
            await self.shipper.deliver_before_stop(timeout_s)

    def done(self) -> None:  # synchronous: mitmproxy's hot reload calls it so
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self.shipper is not None:
            self.shipper.spool_pending()
            self.shipper.lost_at_stop()
            self.shipper = None
