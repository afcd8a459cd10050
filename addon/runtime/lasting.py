"""What outlives a config: built once per process and handed to every policy
a reload builds (``addon/runtime/policy.py``): chain state, live metrics,
usage and its spool, the subscription hub, the coalescer, socket slots,
answer sizes, the HTTP session and upstream client, the Redis link, the
edge cache, the finality look-ups and cache purges in flight, and the
pre-warm's hook. It is
also what the subscription hub reads and tells (``subs.hub.ChainView``): the
hub lives as long as it does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from addon.cache.purge import NodePurges
from addon.cache.store import CacheStore, DiskCacheStore
from addon.chain.finality import FinalityLookups
from addon.chain.state import ChainState
from addon.follow.book import FollowBook
from addon.quota.sizes import AnswerSizes
from addon.quota.sizes_file import FILE_NAME as SIZES_FILE
from addon.quota.sizes_file import load_sizes
from addon.redislink.link import RedisLink
from addon.reporting.live_metrics import CACHE_ERRORS, CACHE_PURGED, FINALITY_LOOKUPS, LiveMetrics
from addon.reporting.usage import Spool, UsageAggregator
from addon.rpc.new_spec import LegacyCaller
from addon.rpc.sub_methods import SUBSCRIBE, UNSUBSCRIBE
from addon.sockets.slots import SocketSlots
from addon.subs.head_watch import HeadWatch
from addon.subs.hub import SubscriptionHub
from addon.upstream.coalesce import Coalescer
from addon.upstream.forward import AiohttpTransport, Transport
from addon.upstream.lean.client import LeanTransport
from common.config import Config
from common.config.model import ProxyConfig


@dataclass(slots=True)
class Lasting:
    clock: Callable[[], float]
    metrics: LiveMetrics
    coalescer: Coalescer = field(default_factory=Coalescer)  # calls in flight stay shareable
    chain: ChainState = field(default_factory=ChainState)  # heights, hashes, best heads
    usage: UsageAggregator = field(default_factory=UsageAggregator)  # records not yet shipped
    slots: SocketSlots = field(default_factory=SocketSlots)  # client WebSockets held
    sizes: AnswerSizes = field(default_factory=AnswerSizes)  # how large kinds of calls answer
    sizes_path: Path | None = None  # where the sizes are kept (``data_dir``), once opened
    subs: SubscriptionHub = field(init=False)  # one hub per process, on each policy's pools
    follows: FollowBook = field(init=False)  # chainHead_v1 follows, on the hub
    head_watch: HeadWatch = field(init=False)  # chain_getHead from a live head subscription
    finality: FinalityLookups = field(init=False)  # look-ups of hashes' finality in flight
    purges: NodePurges = field(init=False)  # a quarantined node's cache entries, going
    ws_connections: int = 0  # client WebSockets open (a gauge)
    # one HTTP session (and one pool of upstream connections) per process
    session: aiohttp.ClientSession | None = None
    transport: Transport | None = None  # set when the event loop runs
    lean: LeanTransport | None = None  # proxy.upstream_client "lean": its pooled connections
    # kept while their settings hold (``keep_for``): Redis, the spool, the cache
    redis: RedisLink | None = None
    spool: Spool | None = None
    cache: CacheStore | None = None  # None: caching off (or storage not opened yet)
    # the pre-warm's fetch-ahead (addon/hooks/prewarm.py), wired when the first runtime is built
    on_new_head: Callable[[str], None] | None = None
    # legacy calls made by chainproxy itself (addon/hooks/internal_calls.py), wired likewise
    legacy: LegacyCaller | None = None

    @classmethod
    def first(cls, config: Config, clock: Callable[[], float] = time.monotonic) -> Lasting:
        """The process's long-lived part, from its first config."""
        p = config.proxy
        metrics = LiveMetrics(p.allowlist | SUBSCRIBE.keys() | UNSUBSCRIBE.keys())
        lasting = cls(clock=clock, metrics=metrics, coalescer=Coalescer(p.coalesce.max_keys))
        lasting.finality = FinalityLookups(
            lasting.chain.blocks,
            count=lambda net, outcome: metrics.count_extra(
                FINALITY_LOOKUPS, network=net, outcome=outcome
            ),
        )
        lasting.purges = NodePurges(
            lambda net, tier, n: metrics.count_extra(CACHE_PURGED, n, network=net, tier=tier)
        )
        return lasting

    def link_for(self, config: Config, previous: Config | None) -> RedisLink | None:
        """The Redis link ``config`` asks for: the one this process has while
        its settings hold (one connection pool per process), else a new one."""
        if config.redis is None:
            return None
        if previous is not None and previous.redis == config.redis and self.redis is not None:
            return self.redis
        self.redis = RedisLink(
            config.redis,
            on_fallback=lambda store: self.metrics.count_extra(
                "chainproxy_redis_fallbacks_total", store=store
            ),
        )
        self.slots.use_redis(self.redis)
        return self.redis

    def keep_storage(self, config: Config, previous: Config) -> None:
        """The spool and the cache stay while ``data_dir`` (and the cache's
        settings) hold; otherwise ``open_storage`` opens new ones."""
        if previous.data_dir != config.data_dir or previous.proxy.cache != config.proxy.cache:
            if self.cache is not None:
                self.cache.close()  # its pending writes go to the old directory first
            self.cache = None
        if previous.data_dir != config.data_dir:
            self.spool = None

    def open_storage(self, config: Config) -> None:
        """The on-disk parts (cache, usage spool, answer sizes) under ``data_dir``; separate from
        building so unit tests can run without touching the disk."""
        p = config.proxy
        if self.cache is None and p.cache.enabled:
            metrics = self.metrics
            self.cache = DiskCacheStore(
                config.data_dir / "cache",
                size_limit_mb=p.cache.size_limit_mb,
                on_error=lambda op: metrics.count_extra(CACHE_ERRORS, op=op),
            )
        if self.spool is None:
            self.spool = Spool(config.data_dir / "spool", max_batches=p.usage.spool_max_batches)
        sizes = config.data_dir / SIZES_FILE
        if self.sizes_path != sizes:  # what a previous process learned (a new data_dir's too)
            self.sizes.restore(load_sizes(sizes))
            self.sizes_path = sizes

    # --- the HTTP session and the upstream client ------------------------------------

    def attach_session(self, session: aiohttp.ClientSession, p: ProxyConfig) -> None:
        """The session, and the upstream client ``p`` asks for: the lean one
        kept (its connections are warm) unless this config asks for aiohttp's."""
        self.session = session
        lean = self.lean
        if p.upstream_client == "aiohttp":
            if lean is not None:
                lean.close()  # calls in flight still finish on it
            self.lean = None
            self.transport = AiohttpTransport(session, max_response_bytes=p.max_response_bytes)
            return
        if lean is None:
            lean = LeanTransport(max_response_bytes=p.max_response_bytes)
        lean.max_response_bytes = p.max_response_bytes
        self.lean = self.transport = lean

    def detach_session(self) -> aiohttp.ClientSession | None:
        """The session, for its owner to close; the lean client's idle
        connections are closed here (those in use close as their calls end)."""
        session, self.session, self.transport = self.session, None, None
        if self.lean is not None:
            self.lean.close()
            self.lean = None
        return session

    # --- what the subscription hub reads and tells (``subs.hub.ChainView``) ----------

    def heights(self, network: str) -> tuple[int | None, int | None]:
        return self.chain.heights(network)

    def head_delivered(self, network: str, header: Any) -> None:
        if self.chain.best.learn(network, header, self.clock()):
            self.new_head(network)

    def new_head(self, network: str) -> None:
        """A new best block is known: the pre-warm may fetch ahead for it."""
        if self.on_new_head is not None:
            self.on_new_head(network)

    def subscription_moved(self, network: str) -> None:
        self.metrics.count_extra("chainproxy_subscription_moves_total", network=network)

    def upstream_silent(self, endpoint: str) -> None:
        self.metrics.count_extra("chainproxy_upstream_silent_total", endpoint=endpoint)
