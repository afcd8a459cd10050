"""Which limiter decides a client's quota: the shared one (Redis) when the
deployment has one, which itself falls back to this process's own while its
link is down (``SharedLimiter.decide``); else this process's own."""

from __future__ import annotations

from collections.abc import Awaitable

from addon.quota.local import Decision
from addon.runtime import Runtime


def decide(
    rt: Runtime, client: str, cost: int, *, take: bool = True
) -> Decision | Awaitable[Decision]:
    """A ``Decision`` now (local) or an awaitable one (Redis, bounded in time)."""
    shared = rt.shared_limiter
    if shared is not None:
        return shared.decide(client, cost, take=take)
    return rt.limiter.check(client, cost, take=take)
