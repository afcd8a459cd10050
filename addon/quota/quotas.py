"""Every quota of the process: the default one and one per tier, each shared
through Redis when the deployment has it (``SharedLimiter``, which falls back
to this process's own while its link is down), else this process's own."""

from __future__ import annotations

from collections.abc import Callable

from addon.quota.local import Decision, RateLimiter
from addon.quota.redis_limiter import SharedLimiter
from addon.quota.tiers import TierBook
from addon.redislink.link import RedisLink
from addon.rpc.later import Later
from common.config.model import CostConfig, RateLimitConfig, TierConfig


class Quotas:
    def __init__(
        self,
        default: RateLimitConfig,
        tiers: tuple[TierConfig, ...] = (),
        *,
        clock: Callable[[], float],
    ) -> None:
        self.default = default
        self.book = TierBook(tiers)
        self.configs: dict[str | None, RateLimitConfig] = {None: default}
        self.configs.update((t.name, t.rate_limit) for t in tiers)
        self.local: dict[str | None, RateLimiter] = {
            name: RateLimiter(rl.requests, rl.window_s, max_clients=rl.max_clients, clock=clock)
            for name, rl in self.configs.items()
        }
        self.shared: dict[str | None, SharedLimiter] = {}

    def use_redis(self, link: RedisLink) -> None:
        self.shared = {name: SharedLimiter(link, lim) for name, lim in self.local.items()}

    def inherit(self, old: Quotas) -> None:
        """Keep the windows of the quotas whose settings held across a reload."""
        for name, rl in self.configs.items():
            if old.configs.get(name) == rl and name in old.local:
                self.local[name] = old.local[name]

    def costs(self, tier: str | None) -> CostConfig:
        return self.configs.get(tier, self.default).costs

    def _limiter(self, tier: str | None) -> RateLimiter | SharedLimiter:
        shared = self.shared.get(tier)
        if shared is not None:
            return shared
        local = self.local.get(tier)
        return local if local is not None else self.local[None]  # (an empty one is falsy)

    def decide(
        self, client: str, cost: int, tier: str | None = None, *, take: bool = True
    ) -> Decision | Later[Decision]:
        """A ``Decision`` now (local) or a ``Later`` one (Redis, bounded in time)."""
        limiter = self._limiter(tier)
        if isinstance(limiter, SharedLimiter):
            return limiter.decide(client, cost, take=take)
        return limiter.check(client, cost, take=take)

    def refund(self, client: str, units: int, tier: str | None = None) -> None:
        """Units taken for a call that was refused later in its run, given back."""
        self._limiter(tier).refund(client, units)

    def charge(self, client: str, units: int, tier: str | None = None) -> None:
        """Units known only after the answer (its bytes), taken whatever is left;
        in Redis without holding up the answer (a callback, no task)."""
        self._limiter(tier).charge(client, units)
