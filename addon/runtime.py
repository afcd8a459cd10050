"""Everything the request path needs, built once from the config.

``Runtime.build`` is plain code (no mitmproxy), so tests build one from a
dict-made config; the ``Settings`` addon builds it from the YAML file and the
other addons read it through the shared ``RuntimeHolder``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from addon.cache.redis_tier import SharedCacheTier
from addon.cache.store import CacheStore, DiskCacheStore
from addon.chain.demand import Demand
from addon.chain.state import ChainState
from addon.quota.quotas import Quotas
from addon.quota.sizes import AnswerSizes
from addon.redislink.link import RedisLink
from addon.reporting.access_log import AccessLog
from addon.reporting.live_metrics import ACCESS_LOG_DROPPED, CROSS_CHECKS, LiveMetrics
from addon.reporting.sidecar_client import SidecarClient
from addon.reporting.usage import Spool, UsageAggregator
from addon.rpc.sub_methods import SUBSCRIBE, UNSUBSCRIBE
from addon.sockets.slots import SocketSlots
from addon.subs.hub import HubSettings, SubscriptionHub
from addon.upstream.admission import BudgetBook
from addon.upstream.budgets import Budgets
from addon.upstream.coalesce import Coalescer
from addon.upstream.cross_check import CrossChecker
from addon.upstream.fair_wait import FairWait
from addon.upstream.forward import AiohttpTransport, Budget, Transport
from addon.upstream.hedge import Hedger
from addon.upstream.http_client import LeanTransport
from addon.upstream.pool import Upstream, UpstreamPool
from addon.upstream.shared_budgets import SharedBudgets
from common.config import Config, Endpoint
from common.config.model import ProxyConfig


@dataclass(slots=True)
class Runtime:
    config: Config
    quotas: Quotas  # the default quota and one per tier
    pools: dict[str, UpstreamPool]
    budget: Budget
    clock: Callable[[], float]
    sidecar: SidecarClient
    ws_pools: dict[str, UpstreamPool]  # node-wss endpoints: for subscriptions
    metrics: LiveMetrics
    subs: SubscriptionHub = field(init=False)  # built on the runtime: it reads the chain
    slots: SocketSlots = field(default_factory=SocketSlots)  # client WebSockets held
    sizes: AnswerSizes = field(default_factory=AnswerSizes)  # how large kinds of calls answer
    ws_connections: int = 0  # client WebSockets open (a gauge)
    transport: Transport | None = None  # set when the event loop runs
    session: aiohttp.ClientSession | None = None
    # proxy.upstream_client "lean": its pooled connections, handed on like the session
    lean: LeanTransport | None = None
    chain: ChainState = field(default_factory=ChainState)  # heights, hashes, best heads
    cache: CacheStore | None = None  # None: caching off (or storage not opened yet)
    usage: UsageAggregator = field(default_factory=UsageAggregator)
    spool: Spool | None = None
    # With a ``redis:`` section: the shared quota and cache tier (DESIGN.md section 10)
    redis: RedisLink | None = None
    shared_cache: SharedCacheTier | None = None
    # Fewer upstream calls, shorter tail (DESIGN-NOTES "Upstream calls")
    coalescer: Coalescer = field(default_factory=Coalescer)
    hedgers: dict[str, Hedger] = field(default_factory=dict)  # per network
    # The nodes' own limits (proxy.upstream_limits; None: switched off)
    budgets: BudgetBook | None = None  # this process's, or the deployment's in Redis
    local_budgets: Budgets | None = None
    fair_waits: dict[str, FairWait] = field(default_factory=dict)  # per network
    # Pre-warm (proxy.prewarm): what clients read at every block, and the
    # fetch-ahead hook the pipeline installs (it runs the steps: no import here)
    demand: Demand = field(default_factory=lambda: Demand(max_reads=0))
    on_new_head: Callable[[str], None] | None = None
    cross_checker: CrossChecker | None = None  # proxy.cross_check (None: off)
    access_log: AccessLog | None = None  # proxy.access_log (None: off)

    @classmethod
    def build(cls, config: Config, clock: Callable[[], float] = time.monotonic) -> Runtime:
        p = config.proxy
        pools = {
            net: UpstreamPool(
                (Upstream.from_endpoint(e) for e in config.rpc_endpoints(net)),
                eject_after=p.failover.eject_after,
                eject_cooldown_s=p.failover.eject_cooldown_s,
                clock=clock,
                max_backoff_s=p.upstream_limits.max_backoff_s,
            )
            for net in p.networks
        }
        ws_pools = {
            net: UpstreamPool(
                (Upstream.from_endpoint(e) for e in config.endpoints if _wss(e, net)),
                eject_after=p.failover.eject_after,
                eject_cooldown_s=p.failover.eject_cooldown_s,
                clock=clock,
            )
            for net in p.networks
        }
        runtime = cls(
            config=config,
            quotas=Quotas(p.rate_limit, p.tiers, clock=clock),
            pools=pools,
            budget=Budget(
                max_attempts=p.failover.max_attempts,
                attempt_timeout_s=p.failover.attempt_timeout_s,
                deadline_s=p.failover.deadline_s,
            ),
            clock=clock,
            sidecar=SidecarClient(config.sidecar, passthrough_timeout_s=p.sidecar_timeout_s),
            ws_pools=ws_pools,
            metrics=LiveMetrics(p.allowlist | SUBSCRIBE.keys() | UNSUBSCRIBE.keys()),
        )
        runtime.coalescer = Coalescer(p.coalesce.max_keys)
        runtime.hedgers = {net: Hedger(p.hedge) for net in p.networks}
        if p.cross_check.sample_rate > 0:
            runtime.cross_checker = CrossChecker(
                p.cross_check.sample_rate,
                count=lambda net, outcome: runtime.metrics.count_extra(
                    CROSS_CHECKS, network=net, outcome=outcome
                ),
                timeout_s=p.failover.attempt_timeout_s,
            )
        if p.access_log is not None:
            runtime.access_log = AccessLog(
                p.access_log,
                client_mode=p.access_log_client,
                on_drop=lambda n: runtime.metrics.count_extra(ACCESS_LOG_DROPPED, n),
            )
        runtime.demand = Demand(max_reads=p.prewarm.max_reads, min_clients=p.prewarm.min_clients)
        if p.upstream_limits.enabled:
            endpoints = [e for net in p.networks for e in config.rpc_endpoints(net)]
            local = Budgets(
                endpoints,
                clock=clock,
                adaptive=p.upstream_limits.adaptive,
                heavy_per_node=p.upstream_limits.heavy_per_node,
            )
            runtime.budgets = runtime.local_budgets = local
            for pool in pools.values():
                pool.budget_use = local.use
            runtime.fair_waits = {net: FairWait() for net in p.networks}
        runtime.subs = SubscriptionHub(ws_pools, runtime, clock=clock, settings=_hub_settings(p))
        if config.redis is not None:
            runtime.use_redis(
                RedisLink(
                    config.redis,
                    on_fallback=lambda store: runtime.metrics.count_extra(
                        "chainproxy_redis_fallbacks_total", store=store
                    ),
                )
            )
        return runtime

    def use_redis(self, link: RedisLink) -> None:
        """Share the quota and the cache through ``link`` (tests pass their own)."""
        assert self.config.redis is not None
        self.redis = link
        self.quotas.use_redis(link)
        self.slots.use_redis(link)
        if self.local_budgets is not None:
            lease_s = self.config.proxy.failover.attempt_timeout_s
            self.budgets = SharedBudgets(link, self.local_budgets, lease_s=lease_s)
        if self.config.proxy.cache.enabled:
            self.shared_cache = SharedCacheTier(link, ttl_s=self.config.redis.cache_ttl_s)

    def inherit(self, old: Runtime) -> None:
        """Carry live state across a config reload, so routing does not fall back
        to "not probed" for a second: upstream health and latency (by id), chain
        heads, learned block heights, open subscriptions, and the quotas whose
        settings held."""
        for pools, old_pools in ((self.pools, old.pools), (self.ws_pools, old.ws_pools)):
            for net, pool in pools.items():
                if net in old_pools:
                    pool.inherit(old_pools[net])
        self.chain = old.chain  # chain facts do not change with the config
        self.metrics = old.metrics  # counts not yet shipped stay with the process
        self.ws_connections = old.ws_connections
        # One hub per process: clients' subscriptions live on, on the new pools.
        old.subs.reconfigure(self.ws_pools, self.subs.settings, self)
        self.subs = old.subs
        self.coalescer = old.coalescer  # calls in flight stay shareable
        for net, hedger in old.hedgers.items():
            if net in self.hedgers and hedger.config == self.hedgers[net].config:
                self.hedgers[net] = hedger  # its latency window
        self.usage = old.usage  # records not yet shipped stay with the process
        self.on_new_head = old.on_new_head
        if old.access_log is not None:
            old.access_log.close()  # the new one (if any) takes over from here
        if old.config.proxy.prewarm == self.config.proxy.prewarm:
            self.demand = old.demand  # what clients asked lately
        if self.local_budgets is not None and old.local_budgets is not None:
            self.local_budgets.inherit(old.local_budgets)  # learned rates, calls in flight
            for net in self.fair_waits.keys() & old.fair_waits.keys():
                self.fair_waits[net] = old.fair_waits[net]  # calls waiting stay in line
        if old.config.data_dir == self.config.data_dir:
            self.spool = old.spool
            if old.config.proxy.cache == self.config.proxy.cache:
                self.cache = old.cache
        self.quotas.inherit(old.quotas)
        self.slots = old.slots  # the sockets open now stay counted
        self.sizes = old.sizes
        if old.redis is not None and old.config.redis == self.config.redis:
            self.use_redis(old.redis)  # one connection pool per process
        elif self.redis is not None:
            self.slots.use_redis(self.redis)
        if old.session is not None:
            # one HTTP session (and one pool of upstream connections) per process
            self.attach_session(old.session, old.lean)

    def gauges(self) -> dict[str, Any]:
        """The current values the next usage batch reports (``metrics_wire``)."""
        return {
            "ws_connections": self.ws_connections,
            "spool_batches": len(self.spool) if self.spool is not None else 0,
            **self.subs.gauges(),
            **self._upstream_gauges(),
        }

    def _upstream_gauges(self) -> dict[str, dict[str, int]]:
        """The nodes' budgets as this process sees them, their back-offs, and
        the nodes a cross-check quarantined."""
        ups = [u for pool in self.pools.values() for u in pool.upstreams.values()]
        quarantined = {u.id: 1 for u in ups if u.quarantined}
        if self.local_budgets is None:
            return {"upstream_quarantined": quarantined}
        sent: dict[str, int] = {}
        learned: dict[str, int] = {}
        for eid, node in self.local_budgets.snapshot().items():
            sent[eid] = int(node["sent_last_s"] or 0)
            if node["learned"]:
                learned[eid] = round(node["rps"] or 0)
        now = self.clock()
        backoff = {
            u.id: math.ceil(u.backoff_until - now)
            for pool in self.pools.values()
            for u in pool.upstreams.values()
            if u.backoff_until > now
        }
        return {
            "upstream_sent_last_s": sent,
            "upstream_learned_rps": learned,
            "upstream_backoff_s": backoff,
            "upstream_quarantined": quarantined,
        }

    def open_storage(self) -> None:
        """The on-disk parts (cache, usage spool) under ``data_dir``; separate from
        ``build`` so unit tests can run without touching the disk."""
        p = self.config.proxy
        if self.cache is None and p.cache.enabled:
            self.cache = DiskCacheStore(
                self.config.data_dir / "cache", size_limit_mb=p.cache.size_limit_mb
            )
        if self.spool is None:
            self.spool = Spool(
                self.config.data_dir / "spool", max_batches=p.usage.spool_max_batches
            )

    # --- what the subscription hub reads and tells (``subs.hub.ChainView``) ---

    def heights(self, network: str) -> tuple[int | None, int | None]:
        return self.chain.heights(network)

    def head_delivered(self, network: str, header: Any) -> None:
        if self.chain.best.learn(network, header, self.clock()):
            self.new_head(network)

    def new_head(self, network: str) -> None:
        """A new best block is known: the pre-warm may fetch ahead for it."""
        if self.on_new_head is not None and self.demand.enabled:
            self.on_new_head(network)

    def subscription_moved(self, network: str) -> None:
        self.metrics.count_extra("chainproxy_subscription_moves_total", network=network)

    def detach_session(self) -> aiohttp.ClientSession | None:
        """The session, for its owner to close; the lean client's idle
        connections are closed here (those in use close as their calls end)."""
        session, self.session, self.transport = self.session, None, None
        self.sidecar.session = None
        if self.lean is not None:
            self.lean.close()
            self.lean = None
        return session

    def attach_session(
        self, session: aiohttp.ClientSession, lean: LeanTransport | None = None
    ) -> None:
        """``lean``: the previous runtime's client, kept (its connections are
        warm) unless this config asks for aiohttp's."""
        self.session = self.sidecar.session = session
        p = self.config.proxy
        if p.upstream_client == "aiohttp":
            if lean is not None:
                lean.close()  # the old runtime's calls in flight still finish on it
            self.lean = None
            self.transport = AiohttpTransport(session, max_response_bytes=p.max_response_bytes)
            return
        if lean is None:
            lean = LeanTransport(max_response_bytes=p.max_response_bytes)
        lean.max_response_bytes = p.max_response_bytes
        self.lean = self.transport = lean


class RuntimeHolder:
    """The one mutable slot the addons share: replaced whole on reconfigure."""

    def __init__(self) -> None:
        self.runtime: Runtime | None = None


def _hub_settings(p: ProxyConfig) -> HubSettings:
    ws = p.websocket
    return HubSettings(
        linger_s=ws.upstream_linger_s,
        stall_s=ws.stall_s,
        call_timeout_s=p.failover.attempt_timeout_s,
        establish_s=p.failover.deadline_s,
    )


def _wss(e: Endpoint, network: str) -> bool:
    return e.network == network and e.kind == "node-wss"
