"""The ``Settings`` addon: declares the ``chainproxy_config`` option and reads
the config file once per change into a new ``Runtime``.

Before any config it lets ``addon/mitm/versions.py`` refuse to start on an
untested mitmproxy or wsproto (its option, ``chainproxy_allow_untested``, is
declared here with the others).

mitmproxy ignores a misspelled ``--set``, so a missing or bad config is loud:
at start-up one error line and exit code 2; on a later reload the
change is refused and the last good config keeps serving.

SIGHUP re-reads the file in place (systemd's ``ExecReload``, the launcher's
reload with one proxy process): no socket closes, and ``Runtime.reload``
carries the subscriptions, quota windows, caches and upstream health over.
Without the handler a SIGHUP would end mitmdump (it handles only INT and TERM).
"""

from __future__ import annotations

import asyncio
import logging
import signal

from mitmproxy import ctx, exceptions
from mitmproxy.addonmanager import Loader

from addon.hooks.holder import RuntimeHolder
from addon.hooks.internal_calls import InternalCalls
from addon.hooks.prewarm import Prewarmer
from addon.mitm import limits as mitm_limits
from addon.mitm import versions as mitm_versions
from addon.mitm.connection_log import quiet_connections
from addon.runtime import Runtime
from common.config import ConfigError, load_config, with_overrides
from common.config.restart import restart_only

log = logging.getLogger("chainproxy")

OPTION = "chainproxy_config"
# Set by the launcher for ``--workers N`` (docs/OPERATIONS.md#scaling-out): its local
# redis-server when the config has no ``redis:``, and its balancer's address,
# whose X-Forwarded-For is then believed like a configured trusted proxy's.
REDIS_OPTION = "chainproxy_redis_url"
TRUST_OPTION = "chainproxy_trusted_proxies"
PROCESSES_OPTION = "chainproxy_processes"
# mitmproxy's own request body cap. With the read limits in place
# (addon/mitm/limits.py) it is the JSON-RPC limit itself: mitmproxy stops
# reading a body (chunked too) there and the client gets the contract's JSON
# 413. Without them (an untested mitmproxy) a memory backstop far above it:
# bodies between the two get the JSON 413 from the gate (addon/pipeline/gate.py), larger ones
# mitmproxy's HTML page.
_BACKSTOP_MIN = 8 * 1_048_576


class Settings:
    def __init__(
        self,
        holder: RuntimeHolder,
        read_limits: mitm_limits.ReadLimits,
        prewarm: Prewarmer | None = None,
    ) -> None:
        self.holder = holder
        self.read_limits = read_limits  # gets each config's limits (addon/mitm/limits.py)
        self.prewarm = prewarm  # wired into the first runtime: fetch ahead at each new head

    def load(self, loader: Loader) -> None:
        loader.add_option(
            OPTION, str, "", "Path to the chainproxy YAML config (e.g. configs/finney.yaml)."
        )
        loader.add_option(
            REDIS_OPTION, str, "", "Overrides redis.url of the config (set by --workers)."
        )
        loader.add_option(
            TRUST_OPTION, str, "", "Comma-separated IPs/CIDRs added to proxy.trusted_proxies."
        )
        loader.add_option(
            PROCESSES_OPTION,
            int,
            1,
            "Proxy processes sharing redis: (set by --workers): each keeps 1/N of a "
            "node's budget while Redis is away.",
        )
        loader.add_option(mitm_versions.OPTION, bool, False, mitm_versions.HELP)

    def running(self) -> None:
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.reload)
        except (NotImplementedError, RuntimeError):  # not the main thread (tests)
            pass

    def reload(self) -> None:
        """SIGHUP: the config file again, applied if it changed and loads."""
        path = ctx.options.chainproxy_config
        try:
            changed = self._apply()
        except exceptions.OptionsError as e:
            log.error("SIGHUP: reload of %s refused, the last good config serves: %s", path, e)
            return
        log.info("SIGHUP: %s %s", path, "applied" if changed else "unchanged")

    def configure(self, updated: set[str]) -> None:
        if "flow_detail" in updated or OPTION in updated:
            quiet_connections(getattr(ctx.options, "flow_detail", None))
        if mitm_versions.OPTION in updated:
            # first of all: an untested mitmproxy or wsproto stops the start here
            mitm_versions.guard(getattr(ctx.options, mitm_versions.OPTION))
        if updated & {OPTION, REDIS_OPTION, TRUST_OPTION, PROCESSES_OPTION}:
            self._apply()

    def _apply(self) -> bool:
        """Read the config and install its runtime; whether it changed."""
        path = ctx.options.chainproxy_config
        try:
            if not path:
                raise ConfigError(
                    OPTION, "not set: pass --set chainproxy_config=configs/finney.yaml"
                )
            config = with_overrides(
                load_config(path),
                redis_url=getattr(ctx.options, REDIS_OPTION, ""),
                trusted=getattr(ctx.options, TRUST_OPTION, ""),
                processes=getattr(ctx.options, PROCESSES_OPTION, 1),
            )
        except ConfigError as e:
            self._refuse(str(e))
            return False
        except Exception as e:  # a reader's bug: the running config stays
            log.exception("chainproxy: %s cannot be read", path)
            self._refuse(f"config error: {path}: cannot be read ({type(e).__name__})")
            return False
        old = self.holder.runtime
        if old is not None and (problem := restart_only(old.config, config)) is not None:
            # as the launcher refuses it: the sidecar this process reports to,
            # and the disk it shares with the machine's other processes, stay
            self._refuse(f"config error: {problem}")
            return False
        if old is not None and old.config == config:
            return False  # unchanged (or a rolled-back bad change): keep limiter and health state
        if old is None:
            on_new_head = self.prewarm.new_head if self.prewarm is not None else None
            runtime = Runtime.build(config, on_new_head=on_new_head)
            runtime.legacy = InternalCalls(self.holder)  # chainproxy's own legacy calls
        else:
            runtime = old.reload(config)  # its long-lived part (the HTTP session too) kept
        try:
            runtime.open_storage()
        except OSError as e:
            self._refuse(f"config error: data_dir: cannot use {config.data_dir}: {e.strerror or e}")
            return False
        self.holder.runtime = runtime
        p = config.proxy
        limited = self.read_limits.install(
            mitm_limits.Limits(
                body_bytes=p.max_body_bytes,
                read_timeout_s=p.read_timeout_s,
                # a WebSocket message is one JSON-RPC body: past the limit it is not kept
                ws_message_bytes=p.max_body_bytes,
            )
        )
        cap = p.max_body_bytes if limited else max(_BACKSTOP_MIN, 4 * p.max_body_bytes)
        if "body_size_limit" in ctx.options and ctx.options.body_size_limit != str(cap):
            ctx.options.update(body_size_limit=str(cap))
        log.info(
            "chainproxy: networks %s, %d upstream(s), config %s",
            ", ".join(config.proxy.networks),
            sum(len(p) for p in runtime.pools.values()),
            path,
        )
        return True

    def _refuse(self, message: str) -> None:
        if self.holder.runtime is None:
            # At start-up: this one line, then exit 2 (SystemExit: no traceback),
            # as the sidecar does, so a unit's RestartPreventExitStatus=2 does
            # not restart a file a restart cannot fix (mitmdump exits 1 on an
            # error log, which systemd would take for a crash worth retrying).
            log.error("%s", message)
            raise SystemExit(2)
        raise exceptions.OptionsError(message) from None
