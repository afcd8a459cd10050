"""Which limiter decides: the shared one in Redis while its link is up, else
this process's own (and the fallback is counted)."""

from __future__ import annotations

from collections.abc import Awaitable

from addon.ratelimit import Decision
from addon.runtime import Runtime


def decide(
    rt: Runtime, client: str, cost: int, *, take: bool = True
) -> Decision | Awaitable[Decision]:
    """A ``Decision`` now (local) or an awaitable one (Redis, bounded in time)."""
    shared = rt.shared_limiter
    if shared is not None:
        if shared.link.up:
            return shared.check(client, cost, take=take)
        shared.link.fallback("ratelimit")
    return rt.limiter.check(client, cost, take=take)
