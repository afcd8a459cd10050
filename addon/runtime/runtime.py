"""Everything the request path needs: the process's long-lived part
(``Lasting``) and the policy the current config decides (``Policy``), split
by lifetime. A reload keeps the one and builds the other again
(``Runtime.reload``); the ``Settings`` addon builds them from the YAML file
and the other addons read the pair through the shared ``RuntimeHolder``
(``addon/hooks/holder.py``).

Plain code (no mitmproxy), so tests build one from a dict-made config. The
steps never import this module: each names what it reads of it (a Protocol
in its own module), and a ``Runtime`` is what they are handed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import aiohttp

from addon.follow.book import FollowBook, FollowSettings
from addon.rpc.new_spec import CHAIN_HEAD_FOLLOW
from addon.runtime.lasting import Lasting
from addon.runtime.policy import Policy, build_policy
from addon.subs.head_watch import HeadWatch
from addon.subs.hub import HubSettings, SubscriptionHub
from common.config import Config
from common.config.model import ProxyConfig

if TYPE_CHECKING:
    from addon.cache.purge import NodePurges
    from addon.cache.redis_tier import SharedCacheTier
    from addon.cache.store import CacheStore
    from addon.chain.demand import Demand
    from addon.chain.finality import FinalityLookups
    from addon.chain.state import ChainState
    from addon.quota.quotas import Quotas
    from addon.quota.sizes import AnswerSizes
    from addon.redislink.link import RedisLink
    from addon.reporting.access_log import AccessLog
    from addon.reporting.live_metrics import LiveMetrics
    from addon.reporting.sidecar_client import SidecarClient
    from addon.reporting.usage import Spool, UsageAggregator
    from addon.rpc.new_spec import LegacyCaller
    from addon.sockets.slots import SocketSlots
    from addon.upstream.admission import BudgetBook
    from addon.upstream.batching import UpstreamBatcher
    from addon.upstream.budgets import Budgets
    from addon.upstream.coalesce import Coalescer
    from addon.upstream.cross_check import CrossChecker
    from addon.upstream.fair_wait import FairWait
    from addon.upstream.forward import Budget, Transport
    from addon.upstream.hedge import Hedger
    from addon.upstream.lean.client import LeanTransport
    from addon.upstream.pool import UpstreamPool

# read through to the part that holds them (a reload replaces only ``policy``)
_LASTING = (
    "clock", "metrics", "coalescer", "chain", "usage", "slots", "sizes", "subs", "follows",
    "head_watch", "ws_connections", "session", "transport", "lean", "redis", "spool", "cache",
    "on_new_head", "legacy", "finality", "purges",
)  # fmt: skip
_POLICY = (
    "config", "pools", "ws_pools", "quotas", "budget", "sidecar", "hedgers", "demand",
    "budgets", "local_budgets", "fair_waits", "cross_checker", "access_log", "shared_cache",
    "batcher",
)  # fmt: skip


class Runtime:
    if not TYPE_CHECKING:  # a type checker reads the fields below as the class's own
        __slots__ = ("lasting", "policy")

    if TYPE_CHECKING:  # the fields of both parts, as read through (``_through``)
        clock: Callable[[], float]
        metrics: LiveMetrics
        coalescer: Coalescer
        chain: ChainState
        usage: UsageAggregator
        slots: SocketSlots
        sizes: AnswerSizes
        subs: SubscriptionHub
        follows: FollowBook
        head_watch: HeadWatch
        ws_connections: int
        session: aiohttp.ClientSession | None
        transport: Transport | None
        lean: LeanTransport | None
        redis: RedisLink | None
        spool: Spool | None
        cache: CacheStore | None
        on_new_head: Callable[[str], None] | None
        legacy: LegacyCaller | None
        finality: FinalityLookups
        purges: NodePurges
        config: Config
        pools: dict[str, UpstreamPool]
        ws_pools: dict[str, UpstreamPool]
        quotas: Quotas
        budget: Budget
        sidecar: SidecarClient
        hedgers: dict[str, Hedger]
        demand: Demand
        budgets: BudgetBook | None
        local_budgets: Budgets | None
        fair_waits: dict[str, FairWait]
        cross_checker: CrossChecker | None
        access_log: AccessLog | None
        shared_cache: SharedCacheTier | None
        batcher: UpstreamBatcher | None

    def __init__(self, lasting: Lasting, policy: Policy) -> None:
        self.lasting = lasting
        self.policy = policy

    @classmethod
    def build(
        cls,
        config: Config,
        clock: Callable[[], float] = time.monotonic,
        *,
        on_new_head: Callable[[str], None] | None = None,
    ) -> Runtime:
        """The process's first runtime; ``on_new_head``: the pre-warm's hook."""
        lasting = Lasting.first(config, clock)
        lasting.on_new_head = on_new_head
        policy = build_policy(config, lasting, None, lasting.link_for(config, None))
        lasting.subs = SubscriptionHub(
            policy.ws_pools, lasting, clock=clock, settings=_hub_settings(config.proxy)
        )
        lasting.follows = FollowBook(
            lasting.subs,
            lambda: lasting.legacy,
            lasting.metrics.count_extra,
            _follow_settings(config.proxy),
        )
        lasting.head_watch = HeadWatch(lasting.subs, clock, lasting.subs.settings.linger_s)
        return cls(lasting, policy)

    def reload(self, config: Config) -> Runtime:
        """The runtime of a new config: this one's long-lived part, a new policy
        carrying over what this one learned. Open sockets, subscriptions, chain
        heads and the HTTP session stay; the old access log is closed."""
        lasting, old = self.lasting, self.policy
        policy = build_policy(config, lasting, old, lasting.link_for(config, old.config))
        if old.access_log is not None:
            old.access_log.close()  # the new one (if any) takes over from here
        lasting.subs.reconfigure(policy.ws_pools, _hub_settings(config.proxy), lasting)
        lasting.follows.settings = _follow_settings(config.proxy)  # live follows keep theirs
        lasting.head_watch.demand.linger_s = lasting.subs.settings.linger_s
        lasting.keep_storage(config, old.config)
        runtime = Runtime(lasting, policy)
        if lasting.session is not None:
            runtime.attach_session(lasting.session)
        return runtime

    def inherit(self, old: Runtime) -> None:
        """Become ``old.reload(self.config)`` (what a reload does, in place)."""
        new = old.reload(self.config)
        if self.policy.access_log is not None:
            self.policy.access_log.close()  # built for nothing: ``new`` has its own
        self.lasting, self.policy = new.lasting, new.policy

    def open_storage(self) -> None:
        """The on-disk parts (cache, usage spool) under ``data_dir``."""
        self.lasting.open_storage(self.policy.config)

    def attach_session(self, session: aiohttp.ClientSession) -> None:
        self.lasting.attach_session(session, self.policy.config.proxy)
        self.policy.sidecar.session = session
        self._hold_views()

    def _hold_views(self) -> None:
        """``proxy.new_spec.view: always``: every network with node-wss
        endpoints followed from now on (needs the running loop and the session)."""
        p = self.policy.config.proxy
        always = p.new_spec.view == "always" and p.new_spec.chain_head
        nets = {n for n, pool in self.policy.ws_pools.items() if len(pool)} if always else set()
        self.lasting.follows.hold(frozenset(nets))

    def detach_session(self) -> aiohttp.ClientSession | None:
        """The session, for its owner to close (the lean client's idle
        connections are closed here)."""
        self.policy.sidecar.session = None
        return self.lasting.detach_session()

    def release_socket(self, sock: Any) -> None:
        """A client socket closed (or is closing): its follows end, then its
        subscriptions (the follows' ids leave its map first)."""
        self.lasting.follows.release(sock)
        self.lasting.subs.release(sock)

    def new_head(self, network: str) -> None:
        """A new best block is known: the pre-warm may fetch ahead for it."""
        self.lasting.new_head(network)

    def gauges(self) -> dict[str, Any]:
        """The current values the next usage batch reports (``metrics_wire``)."""
        lasting = self.lasting
        return {
            "ws_connections": lasting.ws_connections,
            "spool_batches": len(lasting.spool) if lasting.spool is not None else 0,
            **self._subscription_gauges(),
            **self._upstream_gauges(),
        }

    def _subscription_gauges(self) -> dict[str, dict[str, int]]:
        """The hub's, with the follows beside the legacy subscriptions."""
        gauges = self.lasting.subs.gauges()
        book = self.lasting.follows
        # 0 too: the series stays after the last unfollow (a gone series reads "no data")
        gauges["client_subscriptions"][CHAIN_HEAD_FOLLOW] = book.open_follows()
        gauges["follow_pinned_blocks"] = book.pinned()
        return gauges

    def _upstream_gauges(self) -> dict[str, dict[str, int]]:
        """The nodes' budgets as this process sees them, their back-offs, the
        nodes a cross-check quarantined, and the blocks nodes answered "state
        discarded" for although their horizon covered them (the sidecar checks
        those at its next probe)."""
        pools = self.policy.pools
        ups = [u for pool in pools.values() for u in pool.upstreams.values()]
        quarantined = {u.id: 1 for u in ups if u.quarantined}
        lost = {u.id: u.lost_seen for u in ups if u.lost_seen is not None}
        local_budgets = self.policy.local_budgets
        if local_budgets is None:
            return {"upstream_quarantined": quarantined, "upstream_state_lost": lost}
        sent: dict[str, int] = {}
        learned: dict[str, int] = {}
        for eid, node in local_budgets.snapshot().items():
            sent[eid] = int(node["sent_last_s"] or 0)
            if node["learned"]:
                learned[eid] = round(node["rps"] or 0)
        now = self.lasting.clock()
        backoff = {u.id: math.ceil(u.backoff_until - now) for u in ups if u.backoff_until > now}
        return {
            "upstream_sent_last_s": sent,
            "upstream_learned_rps": learned,
            "upstream_backoff_s": backoff,
            "upstream_quarantined": quarantined,
            "upstream_state_lost": lost,
        }


def _through(part: str, name: str) -> property:
    def set_(rt: Runtime, value: Any) -> None:
        setattr(getattr(rt, part), name, value)

    return property(attrgetter(f"{part}.{name}"), set_)


for _name in _LASTING:
    setattr(Runtime, _name, _through("lasting", _name))
for _name in _POLICY:
    setattr(Runtime, _name, _through("policy", _name))


def _hub_settings(p: ProxyConfig) -> HubSettings:
    ws = p.websocket
    return HubSettings(
        linger_s=ws.upstream_linger_s,
        stall_s=ws.stall_s,
        call_timeout_s=p.failover.attempt_timeout_s,
        establish_s=p.failover.deadline_s,
    )


def _follow_settings(p: ProxyConfig) -> FollowSettings:
    n = p.new_spec
    return FollowSettings(
        follows_per_socket=n.follows_per_socket,
        pinned_blocks=n.pinned_blocks,
        operations=n.operations,
        storage_page_items=n.storage_page_items,
        linger_s=p.websocket.upstream_linger_s,
        start_s=p.failover.deadline_s,
    )
