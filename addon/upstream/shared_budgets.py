"""A node's configured budget kept in Redis, for every proxy of the deployment.

``max_rps: 20`` is the node's limit, not each process's: with two proxies each
keeping its own window the node would get 40. One Lua script per call sent
checks and takes both budgets atomically, on Redis's clock: the node's
sliding window of send times (a list, newest first, as the client quota's)
and its calls in flight (a sorted set of leases, each ending at the call's
timeout plus a margin, so a proxy that dies mid-call frees its places by
itself). The lease is removed when the call ends, without waiting for it.

Without Redis (down, or slow past ``redis.timeout_ms``) each process keeps
the whole budget locally (``addon/upstream/budgets.py``): during an outage a
deployment of N proxies may send a node up to N times its budget, and says
so in ``chainproxy_redis_fallbacks_total{store="budgets"}``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
from collections.abc import Awaitable

from addon.redislink.link import RedisLink, RedisUnavailable
from addon.upstream.budgets import CONCURRENCY_POLL_S, Budgets, Ticket

# The window is ``budgets.WINDOW_S`` (1.1 s: arrival jitter). KEYS: the node's
# send times, its leases. ARGV: max_rps (0: none), calls, max_concurrency (0:
# none), lease member, lease ms. Returns 0 (taken) or the ms until they fit.
_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rps = tonumber(ARGV[1])
local calls = tonumber(ARGV[2])
local conc = tonumber(ARGV[3])
local lease = tonumber(ARGV[5])
local wait = 0
local n = math.min(calls, math.max(rps, 1))
if rps > 0 then
  while true do
    local last = redis.call('LINDEX', KEYS[1], -1)
    if not last or tonumber(last) > now - 1100 then break end
    redis.call('RPOP', KEYS[1])
  end
  local used = redis.call('LLEN', KEYS[1])
  local over = used + n - rps
  if over > 0 then
    wait = math.max(1, tonumber(redis.call('LINDEX', KEYS[1], used - over)) + 1100 - now)
  end
end
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= conc then wait = math.max(wait, 20) end
end
if wait > 0 then return wait end
if rps > 0 then
  for i = 1, n do redis.call('LPUSH', KEYS[1], now) end
  redis.call('LTRIM', KEYS[1], 0, rps - 1)
  redis.call('PEXPIRE', KEYS[1], 1100)
end
if conc > 0 then
  redis.call('ZADD', KEYS[2], now + lease, ARGV[4])
  redis.call('PEXPIRE', KEYS[2], lease)
end
return 0
"""

_LEASE_MARGIN_S = 5.0
# one sequence per process: a reload's new book must not reuse the old one's
# lease names while its calls are still in flight
_IDS = itertools.count()


class SharedBudgets:
    """``Budgets``' interface, with the configured budgets in Redis."""

    def __init__(self, link: RedisLink, local: Budgets, *, lease_s: float) -> None:
        self.link = link
        self.local = local
        self.lease_ms = round((lease_s + _LEASE_MARGIN_S) * 1000)
        self._sha = link.pipe.script(_SCRIPT)
        self._member_prefix = f"{socket.gethostname()}:{os.getpid()}:"
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def adaptive(self) -> bool:
        return self.local.adaptive

    def rate_limited(self, endpoint: str) -> None:
        self.local.rate_limited(endpoint)

    def try_take(
        self, endpoint: str, calls: int, heavy: bool = False, retry: bool = False
    ) -> Ticket | float | Awaitable[Ticket | float]:
        if not self.local.configured(endpoint):
            return self.local.try_take(endpoint, calls, heavy, retry)  # unlimited or learned
        if self.local.heavy_full(endpoint, heavy):
            return CONCURRENCY_POLL_S  # the heavy lane is this process's: no round trip
        if not self.link.up:
            self.link.fallback("budgets")
            return self.local.try_take(endpoint, calls, heavy)
        return self._take(endpoint, calls, heavy)

    async def _take(self, endpoint: str, calls: int, heavy: bool) -> Ticket | float:
        node = self.local.node(endpoint)
        member = self._member_prefix + str(next(_IDS))
        command = (
            "EVALSHA",
            self._sha,
            2,
            self.link.key("ub", endpoint, "rps"),
            self.link.key("ub", endpoint, "inflight"),
            node.max_rps or 0,
            calls,
            node.max_concurrency or 0,
            member,
            self.lease_ms,
        )
        try:
            wait_ms = await self.link.run("budgets", lambda: self.link.pipe.submit(*command))
        except RedisUnavailable:
            return self.local.try_take(endpoint, calls, heavy)
        if int(wait_ms) > 0:
            return int(wait_ms) / 1000
        heavy = heavy and self.local.heavy_per_node > 0
        node.take(self.local.clock(), calls, heavy)  # this process's view (gauges, lanes)
        return Ticket(endpoint, member if node.max_concurrency is not None else "", heavy)

    def release(self, ticket: Ticket) -> None:
        self.local.release(ticket)
        link = self.link
        if ticket.member and link.up:
            key = link.key("ub", ticket.endpoint, "inflight")
            zrem = link.run("budgets", lambda: link.pipe.submit("ZREM", key, ticket.member))
            task = asyncio.ensure_future(_quietly(zrem))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def snapshot(self) -> dict[str, dict[str, float | int | None]]:
        return self.local.snapshot()


async def _quietly(op: Awaitable[object]) -> None:
    try:
        await op
    except RedisUnavailable:
        pass  # the lease runs out by itself
