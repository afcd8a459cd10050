"""The ``Settings`` addon: declares chainproxy's mitmproxy options, reads the
config file once per change, and owns the shared upstream HTTP session.

mitmproxy ignores a misspelled ``--set``, so a missing or bad config is loud:
at start-up one error line (mitmdump then exits 1); on a later reload the
change is refused and the last good config keeps serving.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import aiohttp
from mitmproxy import ctx, exceptions

from addon import lean
from addon.forward import new_session
from addon.runtime import Runtime, RuntimeHolder
from addon.snapshot import SnapshotRefresher
from addon.usage import UsageShipper
from common.config import ConfigError, load_config

log = logging.getLogger("chainproxy")

OPTION = "chainproxy_config"
# mitmproxy's own request body cap, a memory backstop far above the JSON-RPC
# limit: bodies between the two get the contract's JSON 413 from the Gate.
_BACKSTOP_MIN = 8 * 1_048_576


class Settings:
    def __init__(self, holder: RuntimeHolder) -> None:
        self.holder = holder
        self._closing: set[asyncio.Task[None]] = set()
        self._refresher = SnapshotRefresher(holder)
        self._refresh_task: asyncio.Task[None] | None = None
        self._shipper: UsageShipper | None = None
        self._ship_task: asyncio.Task[None] | None = None
        self._running = False

    def load(self, loader) -> None:  # type: ignore[no-untyped-def]
        loader.add_option(
            OPTION, str, "", "Path to the chainproxy YAML config (e.g. configs/finney.yaml)."
        )
        loader.add_option(
            lean.FAST_DISPATCH_OPTION,
            bool,
            True,
            "Hand each event only to the addons that handle it (same order and error "
            "handling as mitmproxy; see addon/lean.py and docs/BENCHMARKS.md).",
        )
        loader.add_option(
            lean.OPTION,
            bool,
            False,
            "Lean mode: also unload the built-in addons that a reverse RPC proxy does not "
            "use (see addon/lean.py). Turning it off again needs a restart.",
        )

    def configure(self, updated: set[str]) -> None:
        self._force_proxy_options()
        if self._running and updated & {lean.OPTION, lean.FAST_DISPATCH_OPTION}:
            self._apply_dispatch()
        if OPTION not in updated:
            return
        path = ctx.options.chainproxy_config
        try:
            if not path:
                raise ConfigError(
                    OPTION, "not set: pass --set chainproxy_config=configs/finney.yaml"
                )
            config = load_config(path)
        except ConfigError as e:
            if self.holder.runtime is None:
                # At start-up an error log makes mitmdump exit 1 with this one line.
                log.error("%s", e)
                return
            raise exceptions.OptionsError(str(e)) from None
        old = self.holder.runtime
        if old is not None and old.config == config:
            return  # unchanged (or a rolled-back bad change): keep limiter and health state
        runtime = Runtime.build(config)
        if old is not None:
            runtime.inherit(old)
            if old.session is not None:
                runtime.attach_session(old.session)
        try:
            runtime.open_storage()
        except OSError as e:
            message = f"config error: data_dir: cannot use {config.data_dir}: {e.strerror or e}"
            if old is None:
                log.error("%s", message)
                return
            raise exceptions.OptionsError(message) from None
        self.holder.runtime = runtime
        backstop = max(_BACKSTOP_MIN, 4 * config.proxy.max_body_bytes)
        if "body_size_limit" in ctx.options and ctx.options.body_size_limit != str(backstop):
            ctx.options.update(body_size_limit=str(backstop))
        log.info(
            "chainproxy: networks %s, %d upstream(s), config %s",
            ", ".join(config.proxy.networks),
            sum(len(p) for p in runtime.pools.values()),
            path,
        )

    def _force_proxy_options(self) -> None:
        # Reverse mode would connect to its target on every client connect and drop
        # the client if it is down; the addon answers every request itself.
        if "connection_strategy" in ctx.options and ctx.options.connection_strategy != "lazy":
            ctx.options.update(connection_strategy="lazy")

    def _apply_dispatch(self) -> None:
        o = ctx.options
        lean.set_fast_dispatch(ctx.master, o.chainproxy_fast_dispatch or o.chainproxy_lean)
        if o.chainproxy_lean:
            lean.unload_unused(ctx.master)

    def running(self) -> None:
        self._running = True
        self._apply_dispatch()
        # What exists now (mitmproxy, aiohttp, the config, the runtime) lives as long
        # as the process: take it out of the collector's reach, so a full collection
        # only walks what requests created since. Measured under load: a ~45 ms
        # gen-2 pause every few seconds (in the p99) before, none over 5 ms after.
        gc.collect()
        gc.freeze()
        rt = self.holder.runtime
        if rt is not None and rt.session is None:
            rt.attach_session(new_session())
        loop = asyncio.get_running_loop()
        if self._refresh_task is None:
            self._refresh_task = loop.create_task(self._refresher.run())
        if self._ship_task is None and rt is not None and rt.spool is not None:
            self._shipper = UsageShipper(
                rt.usage, rt.spool, self._deliver, flush_s=rt.config.proxy.usage.flush_s
            )
            self._ship_task = loop.create_task(self._shipper.run())

    async def _deliver(self, batch: dict[str, Any]) -> bool:
        """POST one usage batch; True when it may leave the spool."""
        rt = self.holder.runtime
        if rt is None or rt.session is None:
            return False
        sidecar = rt.config.sidecar
        headers = {"Authorization": f"Bearer {sidecar.token}"} if sidecar.token else {}
        try:
            async with asyncio.timeout(10):
                async with rt.session.post(
                    f"{sidecar.url}/api/v1/internal/usage", json=batch, headers=headers
                ) as resp:
                    if resp.status == 200:
                        return True
                    if resp.status in (400, 413, 422):
                        # A batch the sidecar can never accept must not block the spool.
                        log.error(
                            "sidecar rejected usage batch %s (HTTP %d): dropped",
                            batch.get("batch_id"),
                            resp.status,
                        )
                        return True
                    return False
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    def done(self) -> None:
        # Must stay synchronous (mitmproxy's hot reload calls it so): cancel and
        # schedule the close.
        if self._refresh_task is not None:
            self._refresh_task.cancel()
            self._refresh_task = None
        if self._ship_task is not None:
            self._ship_task.cancel()
            self._ship_task = None
        if self._shipper is not None:
            # Records not yet sent go to the on-disk spool: delivered after restart.
            self._shipper.spool_pending()
            self._shipper = None
        rt = self.holder.runtime
        if rt is None or rt.session is None:
            return
        session, rt.session, rt.transport = rt.session, None, None
        try:
            task = asyncio.get_running_loop().create_task(session.close())
        except RuntimeError:
            return  # no loop left: the process is exiting anyway
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
