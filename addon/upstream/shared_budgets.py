"""A node's configured budget kept in Redis, for every proxy of the deployment.

``max_rps: 20`` is the node's limit, not each process's: with two proxies each
keeping its own window the node would get 40. One Lua script per call sent
checks and takes both budgets atomically, on Redis's clock (to its
microsecond: a window cut to whole ms may close early): the node's
sliding window (``budgets.py``: a call counts while in flight and for a window
after it ended) and its calls in flight. Calls in flight are leases (a sorted
set each: the window's calls, and the requests for ``max_concurrency``), each
ending at the call's timeout plus a margin, so a proxy that dies mid-call
frees its places by itself; the ended calls are a list of end times, newest
first. When the call ends, a second script (sent without waiting for it) moves
its calls from the leases to the end times, at Redis's time then.

Without Redis (down, or slow past ``redis.timeout_ms``) each process keeps
its part of the budget locally (``addon/upstream/budgets.py``): 1/N of it
when it knows it is one of N (``redis.processes``: the launcher of
``--workers N`` says so), else the whole (proxies on other machines are not
counted), and says so in ``chainproxy_redis_fallbacks_total{store="budgets"}``.
A call whose end could not be told to Redis counts there until its lease
runs out.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from addon.redislink.clock import NOW_MS as _NOW
from addon.redislink.link import RedisLink, RedisUnavailable
from addon.upstream.budgets import CONCURRENCY_POLL_S, WINDOW_S, Budgets, Ticket
from addon.upstream.learning import shared_learned

# KEYS: the node's ended calls (their end times), its requests in flight, its
# calls in flight. ARGV: max_rps (0: none), calls, max_concurrency (0: none),
# lease member, lease ms, window ms. Returns 0 (taken) or the ms until they fit.
_TAKE = (
    _NOW
    + """
local rps = tonumber(ARGV[1])
local calls = tonumber(ARGV[2])
local conc = tonumber(ARGV[3])
local lease = tonumber(ARGV[5])
local window = tonumber(ARGV[6])
local wait = 0
local n = math.min(calls, math.max(rps, 1))
if rps > 0 then
  while true do
    local last = redis.call('LINDEX', KEYS[1], -1)
    if not last or tonumber(last) > now - window then break end
    redis.call('RPOP', KEYS[1])
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  local ended = redis.call('LLEN', KEYS[1])
  local over = ended + redis.call('ZCARD', KEYS[3]) + n - rps
  if over > 0 then
    if over <= ended then
      local left = tonumber(redis.call('LINDEX', KEYS[1], ended - over)) + window - now
      wait = math.max(1, math.ceil(left))
    else
      wait = window
    end
  end
end
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= conc then wait = math.max(wait, 20) end
end
if wait > 0 then return wait end
if rps > 0 then
  for i = 1, n do redis.call('ZADD', KEYS[3], now + lease, ARGV[4] .. '#' .. i) end
  redis.call('PEXPIRE', KEYS[3], lease)
end
if conc > 0 then
  redis.call('ZADD', KEYS[2], now + lease, ARGV[4])
  redis.call('PEXPIRE', KEYS[2], lease)
end
return 0
"""
)

# The call ended: the same KEYS; ARGV: lease member, calls it counted (0: no
# rate), max_rps, window ms. The list outlives its newest end by a second more
# than the window (its entries leave by their times; the key only goes idle).
_END = (
    _NOW
    + """
local ended = now + 0.001
redis.call('ZREM', KEYS[2], ARGV[1])
local n = tonumber(ARGV[2])
if n > 0 then
  for i = 1, n do
    redis.call('ZREM', KEYS[3], ARGV[1] .. '#' .. i)
    redis.call('LPUSH', KEYS[1], ended)
  end
  redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]) + 1000)
end
return 0
"""
)

_WINDOW_MS = round(WINDOW_S * 1000)
_LEARNED_KEPT = 10_000  # end times kept for a node without a configured rate
_LEASE_MARGIN_S = 5.0
# one sequence per process: a reload's new book must not reuse the old one's
# lease names while its calls are still in flight
_IDS = itertools.count()


class SharedBudgets:
    """``Budgets``' interface, with the configured budgets in Redis."""

    synchronous = False  # try_take may ask Redis

    def __init__(
        self, link: RedisLink, local: Budgets, *, lease_s: float, processes: int = 1
    ) -> None:
        self.link = link
        self.local = local
        self.processes = processes  # sharing a configured budget while Redis is away
        self.lease_ms = round((lease_s + _LEASE_MARGIN_S) * 1000)
        self._take_sha = link.pipe.script(_TAKE)
        self._end_sha = link.pipe.script(_END)
        self._learn_take_sha = link.pipe.script(shared_learned.TAKE)
        self._learn_sha = link.pipe.script(shared_learned.LEARN)
        self._member_prefix = f"{socket.gethostname()}:{os.getpid()}:"
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def adaptive(self) -> bool:
        return self.local.adaptive

    def learns(self, endpoint: str) -> bool:
        return self.local.learns(endpoint)

    def _shared_learning(self, endpoint: str) -> bool:
        """The node's window and learned rate are in Redis (no configured budget)."""
        return self.local.adaptive and not self.local.configured(endpoint)

    def rate_limited(self, endpoint: str, untaught: Callable[[], object] | None = None) -> None:
        """A 429: the node's learned rate cut in Redis, from every proxy's calls
        in its window (this process's book, while Redis is down)."""
        if not self._shared_learning(endpoint) or not self.link.up:
            self.local.rate_limited(endpoint, untaught)
            return
        command = (
            "EVALSHA",
            self._learn_sha,
            3,
            *shared_learned.keys(self.link.key, endpoint),
            *shared_learned.learn_args(),
        )
        self._background(self._learn(endpoint, command, untaught))

    async def _learn(
        self, endpoint: str, command: tuple[Any, ...], untaught: Callable[[], object] | None
    ) -> None:
        try:
            reply = await self.link.run("budgets", lambda: self.link.pipe.submit(*command))
        except RedisUnavailable:
            self.local.rate_limited(endpoint, untaught)
            return
        if not shared_learned.mirror(self.local, endpoint, reply) and untaught is not None:
            untaught()

    def try_take(
        self,
        endpoint: str,
        calls: int,
        heavy: bool = False,
        retry: bool = False,
        room: int = 0,
        *,
        whole: bool = False,
    ) -> Ticket | float | Awaitable[Ticket | float]:
        if not self.local.configured(endpoint):
            if self._shared_learning(endpoint) and not self.local.heavy_full(endpoint, heavy):
                if self.link.up:
                    return self._take_learned(endpoint, calls, heavy, retry, room, whole)
                self.link.fallback("budgets")
            # unlimited or learned
            return self.local.try_take(endpoint, calls, heavy, retry, room, whole=whole)
        if self.local.heavy_full(endpoint, heavy):
            return CONCURRENCY_POLL_S  # the heavy lane is this process's: no round trip
        if not self.link.up:
            self.link.fallback("budgets")
            return self.local.try_take(endpoint, calls, heavy, share=self.processes)
        return self._take(endpoint, calls, heavy)

    def _keys(self, endpoint: str) -> tuple[str, str, str]:
        key = self.link.key
        return (
            key("ub", endpoint, "ended"),
            key("ub", endpoint, "inflight"),
            key("ub", endpoint, "open"),
        )

    async def _take(self, endpoint: str, calls: int, heavy: bool) -> Ticket | float:
        node = self.local.node(endpoint)
        member = self._member_prefix + str(next(_IDS))
        command = (
            "EVALSHA",
            self._take_sha,
            3,
            *self._keys(endpoint),
            node.max_rps or 0,
            calls,
            node.max_concurrency or 0,
            member,
            self.lease_ms,
            _WINDOW_MS,
        )
        try:
            wait_ms = await self.link.run("budgets", lambda: self.link.pipe.submit(*command))
        except RedisUnavailable:
            return self.local.try_take(endpoint, calls, heavy, share=self.processes)
        if int(wait_ms) > 0:
            return int(wait_ms) / 1000
        heavy = heavy and self.local.heavy_per_node > 0
        node.take(self.local.clock(), calls, heavy)  # this process's view (gauges, lanes)
        return Ticket(endpoint, member, heavy, max(1, calls))

    async def _take_learned(
        self, endpoint: str, calls: int, heavy: bool, retry: bool, room: int, whole: bool = False
    ) -> Ticket | float:
        member = self._member_prefix + str(next(_IDS))
        # a learned rate paces single calls only, and upstream batches (whole)
        paced = (calls <= 1 or whole) and not retry
        command = (
            "EVALSHA",
            self._learn_take_sha,
            3,
            *shared_learned.keys(self.link.key, endpoint),
            *shared_learned.take_args(calls, paced, member, self.lease_ms, room),
        )
        try:
            reply = await self.link.run("budgets", lambda: self.link.pipe.submit(*command))
        except RedisUnavailable:
            return self.local.try_take(endpoint, calls, heavy, retry, room, whole=whole)
        wait_ms = shared_learned.mirror(self.local, endpoint, reply)
        if wait_ms > 0:
            return wait_ms / 1000
        heavy = heavy and self.local.heavy_per_node > 0
        self.local.node(endpoint).take(self.local.clock(), calls, heavy)  # this process's view
        return Ticket(endpoint, member, heavy, max(1, calls))

    def release(self, ticket: Ticket) -> None:
        self.local.release(ticket)
        link = self.link
        if ticket.member and link.up:
            rps = self.local.node(ticket.endpoint).max_rps or 0
            counted = min(ticket.calls, max(rps, 1)) if rps > 0 else 0
            if self._shared_learning(ticket.endpoint):
                counted, rps = min(ticket.calls, shared_learned.MAX_COUNTED), _LEARNED_KEPT
            command = (
                "EVALSHA",
                self._end_sha,
                3,
                *self._keys(ticket.endpoint),
                ticket.member,
                counted,
                max(rps, 1),
                _WINDOW_MS,
            )
            self._background(_quietly(link.run("budgets", lambda: link.pipe.submit(*command))))

    def _background(self, op: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(op)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def snapshot(self) -> dict[str, dict[str, float | int | None]]:
        return self.local.snapshot()


async def _quietly(op: Awaitable[object]) -> None:
    try:
        await op
    except RedisUnavailable:
        pass  # the leases run out by themselves
