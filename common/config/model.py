"""The configuration as the addon and the sidecar use it: frozen dataclasses
whose defaults are the documented ones (docs/CONFIGURATION.md#every-key). Built by
``parse_config``; tests may build them directly."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from common.allowlist_default import DEFAULT_ALLOWLIST
from common.config.new_spec import NewSpecConfig
from common.config.upstream_calls import (
    CoalesceConfig,
    CrossCheckConfig,
    HeadPinningConfig,
    HedgeConfig,
    PrewarmConfig,
    UpstreamBatchingConfig,
    UpstreamLimitsConfig,
)

KINDS = ("node-rpc", "node-wss", "data-artifact", "sse")

FINNEY_GENESIS = "0x2f0555cc76fc2840a25a6ea3b9637146806f1f44b090c175ffde2a7e5ab36c03"
TEST_GENESIS = "0x8f9cf856bf558a14440e75569c9e58594757048d7b3a84b5d25f6bd978263105"


@dataclass(frozen=True, slots=True)
class CostConfig:
    """``proxy.rate_limit.costs``: what a call costs in quota units
    (``addon/quota/costs.py``). A plain call costs 1."""

    enabled: bool = True  # false: every call costs 1 (plain call counting)
    methods: dict[str, int] = field(default_factory=dict)  # base cost per method
    runtime_apis: dict[str, int] = field(default_factory=dict)  # state_call by its API
    keys_per_unit: int = 100  # state_getKeys(Paged), childstate_*: keys asked per unit
    storage_keys_per_unit: int = 10  # state_queryStorage(At): keys queried per unit
    free_bytes: int = 65_536  # an answer up to this size costs nothing more ...
    bytes_per_unit: int = 65_536  # ... then one unit per started block of this size


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    requests: int = 100  # quota units per window (a plain call costs 1)
    window_s: float = 60.0
    max_clients: int = 100_000  # bound on tracked clients; idle ones are evicted first
    ipv6_prefix: int = 128  # IPv6 clients share a quota per /ipv6_prefix (64: per subnet)
    costs: CostConfig = field(default_factory=CostConfig)

    @property
    def policy(self) -> str:
        return f"{self.requests};w={self.window_s:g}"


@dataclass(frozen=True, slots=True)
class FailoverConfig:
    max_attempts: int = 3
    attempt_timeout_s: float = 5.0
    deadline_s: float = 15.0
    eject_after: int = 3  # consecutive failures before passive ejection
    eject_cooldown_s: float = 30.0


@dataclass(frozen=True, slots=True)
class CacheConfig:
    size_limit_mb: int = 512
    enabled: bool = True
    # Extra block-hash-pinned methods to cache: method -> index of the block-hash
    # param (chain_getBlock/chain_getHeader/chain_getBlockHash are always cached).
    methods: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UsageConfig:
    flush_s: float = 2.0  # records reach the sidecar within this (plus delivery)
    spool_max_batches: int = 10_000  # past it the oldest batch is dropped (counted, logged)
    # Batches kept in memory while the spool cannot be written (a full disk);
    # past it the oldest is dropped (counted, logged). One batch per flush_s at
    # most: 1000 is 33 min at flush_s 2 (longer while the sidecar refuses too).
    memory_max_batches: int = 1000


@dataclass(frozen=True, slots=True)
class WebSocketConfig:
    """``proxy.websocket``: read subscriptions over WebSocket."""

    subscriptions: bool = True
    max_subscriptions: int = 1024  # per client socket
    max_connections_per_client: int = 32  # sockets open at once, across the deployment
    max_subscriptions_per_client: int = 2048  # across a client's sockets
    max_queued_notifications: int = 1024  # a client that leaves more unread is closed (1008)
    max_buffer_bytes: int = 8 * 1_048_576  # ... or more bytes unsent in its socket
    upstream_linger_s: float = 30.0  # an upstream subscription outlives its last client
    # no new head for this long while the network advances: the socket is silent,
    # every subscription on it moves (two Bittensor block times)
    stall_s: float = 24.0
    # client sockets: a WebSocket ping this often (0: none), and a client that has
    # not answered one within ping_timeout_s is closed (1011) and its slot freed
    ping_interval_s: float = 30.0
    ping_timeout_s: float = 30.0


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    networks: tuple[str, ...] = ("finney", "test")
    allowlist: frozenset[str] = DEFAULT_ALLOWLIST
    rate_limit: RateLimitConfig = field(default_factory=RateLimitConfig)
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    failover: FailoverConfig = field(default_factory=FailoverConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    usage: UsageConfig = field(default_factory=UsageConfig)
    max_body_bytes: int = 1_048_576
    max_batch: int = 100
    max_response_bytes: int = 64 * 1_048_576  # an upstream answer larger than this fails over
    # the upstream HTTP client: "lean" (addon/upstream/lean/client.py) or "aiohttp"
    upstream_client: str = "lean"
    sidecar_timeout_s: float = 10.0  # for dashboard/API requests passed to the sidecar
    drain_s: float = 10.0  # SIGTERM: calls in flight answered within this, then exit
    read_timeout_s: float = 30.0  # a request (head, body) must arrive within this of its 1st byte
    websocket: WebSocketConfig = field(default_factory=WebSocketConfig)
    coalesce: CoalesceConfig = field(default_factory=CoalesceConfig)
    upstream_batching: UpstreamBatchingConfig = field(default_factory=UpstreamBatchingConfig)
    head_pinning: HeadPinningConfig = field(default_factory=HeadPinningConfig)
    hedge: HedgeConfig = field(default_factory=HedgeConfig)
    upstream_limits: UpstreamLimitsConfig = field(default_factory=UpstreamLimitsConfig)
    prewarm: PrewarmConfig = field(default_factory=PrewarmConfig)
    cross_check: CrossCheckConfig = field(default_factory=CrossCheckConfig)
    new_spec: NewSpecConfig = field(default_factory=NewSpecConfig)
    access_log: str | None = None  # None: off; "stdout"; or a file path
    access_log_client: str = "truncated"  # full | truncated | hashed
    tiers: tuple[TierConfig, ...] = ()


@dataclass(frozen=True, slots=True)
class TierConfig:
    """One of ``proxy.tiers``: clients matched by address or API key get its
    quota (and may get more sockets and subscriptions)."""

    name: str
    cidrs: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    keys: tuple[str, ...] = field(default=(), repr=False)  # secrets: never shown
    rate_limit: RateLimitConfig = field(default_factory=RateLimitConfig)
    max_connections_per_client: int | None = None  # None: proxy.websocket's
    max_subscriptions_per_client: int | None = None


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    host: str = "127.0.0.1"
    port: int = 8081
    url: str = "http://127.0.0.1:8081"
    token: str | None = None


@dataclass(frozen=True, slots=True)
class ProbeConfig:
    interval_s: float = 60.0
    head_interval_s: float = 6.0
    timeout_s: float = 10.0
    fail_threshold: int = 2
    recover_threshold: int = 2


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    name: str
    max_lag_blocks: int = 3
    genesis: str | None = None


@dataclass(frozen=True, slots=True)
class Endpoint:
    url: str  # may hold a secret: never log or publish it, use ``safe_url``
    provider: str
    kind: str
    network: str
    subnet: int = 0
    archive: bool = False
    region: str = ""
    notes: str = ""
    id: str = ""
    safe_url: str = ""
    # the node's own budget (its provider's limits): the proxy never sends more;
    # None: unlimited (a budget is learned if the node answers 429)
    max_rps: int | None = None
    max_concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class RedisConfig:
    """``redis:``: one quota per client and a shared cache tier across processes."""

    url: str = field(repr=False)  # may hold a password: never log it, use ``safe_url``
    key_prefix: str = "chainproxy:"
    timeout_ms: float = 50.0  # a request waits at most this on Redis, then goes local
    cache_ttl_s: int = 86_400  # shared cache entries expire: Redis memory stays bounded
    safe_url: str = ""
    # proxy processes on this machine sharing it (not a key of the file: the
    # launcher of --workers N sets it): while Redis is away each keeps 1/N of
    # a node's configured budget, not the whole
    processes: int = 1


@dataclass(frozen=True, slots=True)
class Config:
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    sidecar: SidecarConfig = field(default_factory=SidecarConfig)
    data_dir: Path = Path("./data")
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    networks: Mapping[str, NetworkConfig] = field(default_factory=dict)
    endpoints: tuple[Endpoint, ...] = ()
    redis: RedisConfig | None = None  # None: per-process limiter, per-machine cache

    def rpc_endpoints(self, network: str) -> tuple[Endpoint, ...]:
        """The endpoints the proxy may forward HTTP JSON-RPC calls of ``network`` to."""
        return tuple(e for e in self.endpoints if e.network == network and e.kind == "node-rpc")

    def endpoint_by_id(self, endpoint_id_: str) -> Endpoint | None:
        return next((e for e in self.endpoints if e.id == endpoint_id_), None)
