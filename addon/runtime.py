"""Everything the request path needs, built once from the config.

``Runtime.build`` is plain code (no mitmproxy), so tests build one from a
dict-made config; the ``Settings`` addon builds it from the YAML file and the
other addons read it through the shared ``RuntimeHolder``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from addon.forward import AiohttpTransport, Budget, Transport
from addon.pinning import BlockIndex
from addon.ratelimit import RateLimiter
from addon.upstreams import TIER_UNPROBED, Upstream, UpstreamPool
from chainproxy.config import Config


@dataclass(slots=True)
class Runtime:
    config: Config
    limiter: RateLimiter
    pools: dict[str, UpstreamPool]
    budget: Budget
    clock: Callable[[], float]
    transport: Transport | None = None  # set when the event loop runs
    session: aiohttp.ClientSession | None = None
    tips: dict[str, int] = field(default_factory=dict)  # from the sidecar's snapshot
    finalized: dict[str, int] = field(default_factory=dict)
    blocks: BlockIndex = field(default_factory=BlockIndex)  # hash -> height, learned

    @classmethod
    def build(cls, config: Config, clock: Callable[[], float] = time.monotonic) -> Runtime:
        p = config.proxy
        pools = {
            net: UpstreamPool(
                (Upstream.from_endpoint(e) for e in config.rpc_endpoints(net)),
                eject_after=p.failover.eject_after,
                eject_cooldown_s=p.failover.eject_cooldown_s,
                clock=clock,
            )
            for net in p.networks
        }
        return cls(
            config=config,
            limiter=RateLimiter(
                p.rate_limit.requests,
                p.rate_limit.window_s,
                max_clients=p.rate_limit.max_clients,
                clock=clock,
            ),
            pools=pools,
            budget=Budget(
                max_attempts=p.failover.max_attempts,
                attempt_timeout_s=p.failover.attempt_timeout_s,
                deadline_s=p.failover.deadline_s,
            ),
            clock=clock,
        )

    def inherit(self, old: Runtime) -> None:
        """Carry live state across a config reload, so routing does not fall back
        to "not probed" for a second: upstream health and latency (by id), chain
        heads, learned block heights, and the rate limiter if its settings held."""
        for net, pool in self.pools.items():
            old_pool = old.pools.get(net)
            if old_pool is None:
                continue
            for uid, up in pool.upstreams.items():
                prev = old_pool.upstreams.get(uid)
                if prev is None:
                    continue
                if prev.tier != TIER_UNPROBED:  # a snapshot had spoken for it
                    up.tier, up.score, up.best, up.archive = (
                        prev.tier,
                        prev.score,
                        prev.best,
                        prev.archive,
                    )
                up.ewma_ms, up.updated_at = prev.ewma_ms, prev.updated_at
                up.consecutive_failures, up.ejected_until = (
                    prev.consecutive_failures,
                    prev.ejected_until,
                )
            for heads_new, heads_old in ((self.tips, old.tips), (self.finalized, old.finalized)):
                if net in heads_old:
                    heads_new[net] = heads_old[net]
        self.blocks = old.blocks
        if old.config.proxy.rate_limit == self.config.proxy.rate_limit:
            self.limiter = old.limiter

    def set_heads(self, network: str, tip: int | None, finalized: int | None) -> None:
        """Chain heights from the latest snapshot (None: unknown, forget the old)."""
        for store, value in ((self.tips, tip), (self.finalized, finalized)):
            if value is None:
                store.pop(network, None)
            else:
                store[network] = value

    def attach_session(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.transport = AiohttpTransport(
            session, max_response_bytes=self.config.proxy.max_response_bytes
        )


class RuntimeHolder:
    """The one mutable slot the addons share: replaced whole on reconfigure."""

    def __init__(self) -> None:
        self.runtime: Runtime | None = None
