"""One quota per client across every proxy process and machine, in Redis.

The same sliding window as ``addon/quota/local.py`` (the 101st call in any 60 s
is refused; a batch is taken whole or refused whole), kept exactly: each
client has a Redis list of the times of its last ``limit`` calls, newest
first. One Lua script per request or batch decides and records atomically and
returns what the rate-limit headers need, so it is one round trip; it reads
Redis's own clock, so machines with skewed clocks still share one window.

Why not the ``limits`` library: its Redis moving window (the same list) answers
only yes/no; the remaining count, reset and Retry-After every answer carries
would cost a second round trip (``get_window_stats``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from addon.quota.local import Decision, RateLimiter
from addon.redislink.link import UNAVAILABLE, RedisLink
from addon.redislink.pipe import bulk
from addon.rpc.later import Later

# KEYS[1]: the client's list. ARGV: limit, window (ms), cost, take (1: if it fits,
# 0: only say, 2: whatever is left, a cost known after the answer, 3: give back
# the newest ``cost``, taken for a call refused later in its run).
# Returns {allowed, used, newest_ms, retry_at_ms, now_ms}.
_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local take = tonumber(ARGV[4])
-- forget the calls that left the window (oldest at the tail; each popped once),
-- so a check costs the same whatever the limit
while true do
  local last = redis.call('LINDEX', KEYS[1], -1)
  if not last or tonumber(last) > now - window then break end
  redis.call('RPOP', KEYS[1])
end
local used = redis.call('LLEN', KEYS[1])
if take == 3 then
  for i = 1, math.min(cost, used) do redis.call('LPOP', KEYS[1]) end
  return {1, math.max(used - cost, 0), now, 0, now}
end
local allowed = used + cost <= limit
if take == 2 then
  for i = 1, math.min(cost, limit) do redis.call('LPUSH', KEYS[1], now) end
  redis.call('LTRIM', KEYS[1], 0, limit - 1)
  redis.call('PEXPIRE', KEYS[1], window)
  return {1, math.min(used + cost, limit), now, 0, now}
end
local newest = 0
if used > 0 then newest = tonumber(redis.call('LINDEX', KEYS[1], 0)) end
local retry_at = 0
if not allowed then
  if cost > limit then
    retry_at = -1
  else
    -- the youngest of the oldest calls that must leave for this one to fit
    retry_at = tonumber(redis.call('LINDEX', KEYS[1], limit - cost)) + window
  end
elseif take == 1 then
  for i = 1, cost do redis.call('LPUSH', KEYS[1], now) end
  redis.call('LTRIM', KEYS[1], 0, limit - 1)
  redis.call('PEXPIRE', KEYS[1], window)
  used = used + cost
  newest = now
end
return {allowed and 1 or 0, used, newest, retry_at, now}
"""


class SharedLimiter:
    """The Redis quota; ``local`` is this process's limiter, used while Redis is not."""

    def __init__(self, link: RedisLink, local: RateLimiter) -> None:
        self.link = link
        self.local = local
        self.limit = local.limit
        self.window_ms = round(local.window * 1000)
        self.policy = local.policy
        self._sha = link.pipe.script(_SCRIPT)
        # the EVALSHA's constant parts, packed once: every call pays for packing
        self._head = b"*8\r\n" + bulk("EVALSHA") + bulk(self._sha) + bulk(1)
        self._limits = bulk(self.limit) + bulk(self.window_ms)
        self._take_one = self._limits + bulk(1) + bulk(1)  # nearly every check

    def key(self, client: str) -> str:
        return self.link.key("rl", self.policy, client)

    def decide(
        self, client: str, cost: int = 1, *, take: bool = True
    ) -> Decision | Later[Decision]:
        """The shared decision (a ``Later``: one round trip, resolved from the
        connection's ``data_received``) while the link is up; else this
        process's own, now, and the fallback is counted."""
        if self.link.up:
            return self.later(client, cost, take=take)
        self.link.fallback("ratelimit")
        return self.local.check(client, cost, take=take)

    def later(self, client: str, cost: int = 1, *, take: bool = True) -> Later[Decision]:
        """The shared decision; the local one if Redis does not answer in time.
        No coroutine: ``then`` callbacks run as the reply is read."""
        out: Later[Decision] = Later()

        def decided(reply: Any) -> None:
            if reply is UNAVAILABLE:
                out.resolve(self.local.check(client, cost, take=take))
            else:
                out.resolve(self.decision(reply))

        key = self.key(client)
        command = ("EVALSHA", self._sha, 1, key, self.limit, self.window_ms, cost, int(take))
        tail = self._take_one if cost == 1 and take else self._limits + bulk(cost) + bulk(int(take))
        self.link.call("ratelimit", command, decided, self._head + bulk(key) + tail)
        return out

    async def check(self, client: str, cost: int = 1, *, take: bool = True) -> Decision:
        """``later``, awaited."""
        return await self.later(client, cost, take=take)

    def charge(self, client: str, units: int) -> None:
        """``RateLimiter.charge`` for the deployment: sent at once, not awaited
        by the answer it follows; the local quota takes it while Redis is down
        or does not answer in time."""
        self._send(client, units, 2, self.local.charge)

    def refund(self, client: str, units: int) -> None:
        """``RateLimiter.refund`` for the deployment (sent, not awaited)."""
        self._send(client, units, 3, self.local.refund)

    def _send(self, client: str, units: int, take: int, local: Callable[[str, int], None]) -> None:
        """``units`` to the script with ``take`` (2: charge, 3: give back), not
        awaited; ``local`` does it in this process while Redis cannot."""
        if units <= 0:
            return
        if not self.link.up:
            local(client, units)
            return

        def sent(reply: Any) -> None:
            if reply is UNAVAILABLE:
                local(client, units)

        key = self.key(client)
        command = ("EVALSHA", self._sha, 1, key, self.limit, self.window_ms, units, take)
        self.link.call("ratelimit", command, sent)

    def decision(self, reply: list[int]) -> Decision:
        allowed, used, newest, retry_at, now = reply  # Lua numbers: integers
        window = self.window_ms
        if retry_at < 0:
            retry_s = window / 1000  # more than the whole quota: never fits
        else:
            retry_s = max(0, retry_at - now) / 1000
        return Decision(
            bool(allowed),
            self.limit,
            max(0, self.limit - used),
            max(0, newest + window - now) / 1000 if used else 0.0,
            0.0 if allowed else retry_s,
            self.policy,
        )
