"""Learned rates kept in Redis, for every proxy of the deployment.

A node without a configured budget (no ``max_rps`` nor ``max_concurrency``)
that may learn a rate (``proxy.upstream_limits.adaptive``) has its window in
Redis, like a configured one (``shared_budgets.py``: the same keys and
leases, a call counted from its take until a window after it ended, whoever
sent it), and its learned rate beside it: a hash of the rate, its last cut
and the last look at it (``addon/upstream/learning/learned.py``'s ``Learned``, in
Redis's ms). One script per call sent takes a place, paced by the rate when
there is one (a single call that is no failover), and grows the rate while
the node is full; another, on a 429, cuts it from the calls in the node's
window, every proxy's. So one proxy's 429 teaches them all, and the rate is
the node's limit, not one process's share of it.

The rules are ``learned.py``'s, run in Lua on Redis's clock with its
constants as arguments; each reply also sets this process's copy
(``Budgets``), which paces the node alone while Redis is down.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from addon.redislink.clock import NOW_MS as _NOW
from addon.upstream.budgets import WINDOW_S, Budgets
from addon.upstream.learning import learned
from addon.upstream.learning.learned import Learned

MAX_COUNTED = 1000  # calls of one request counted in the window at most (a huge batch)
_WINDOW_MS = round(WINDOW_S * 1000)

# KEYS: the node's ended calls, its calls in flight (leases), its learned rate.
# The window pruned to now; ``used`` the calls in it; the learned state read
# and forgotten when stale. ARGV from 1: the constants (learned.args()).
_STATE = (
    _NOW
    + """
local CUT, CUT_EVERY, MIN_SEEN = tonumber(ARGV[1]), tonumber(ARGV[2]) * 1000, tonumber(ARGV[3])
local GROW, MIN_STEP = tonumber(ARGV[4]), tonumber(ARGV[5])
local MAX_ACCRUE, FORGET, CEILING = tonumber(ARGV[6]), tonumber(ARGV[7]) * 1000, tonumber(ARGV[8])
local FAST, MIN_FAST = tonumber(ARGV[9]), tonumber(ARGV[10])
local window = tonumber(ARGV[11])
while true do
  local last = redis.call('LINDEX', KEYS[1], -1)
  if not last or tonumber(last) > now - window then break end
  redis.call('RPOP', KEYS[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local used = redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2])
local st = redis.call('HMGET', KEYS[3], 'rate', 'cut', 'grown', 'ceiling')
local rate, cut, grown = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
local ceiling = tonumber(st[4]) or 0
if rate and (not cut or not grown or now - cut > FORGET or rate > CEILING) then
  redis.call('DEL', KEYS[3])
  rate = nil
end
local function reply(wait)
  if not rate then return {wait, '-1', '0', '0'} end
  return {wait, tostring(rate), tostring(now - cut), tostring(ceiling)}
end
"""
)

# A call (``calls``, paced or not) takes its place. ARGV from 12: calls,
# paced (1: a single call that is no failover), lease member, lease ms.
# Returns {ms until it may (0: taken), rate ('-1': none), ms since its cut,
# ceiling}.
TAKE = (
    _STATE
    + """
local calls, paced = tonumber(ARGV[12]), tonumber(ARGV[13]) == 1
local member, lease = ARGV[14], tonumber(ARGV[15])
local wait = 0
if rate and paced then
  local limit = math.max(1, math.floor(rate))
  local over = used + math.min(calls, limit) - limit
  if over > 0 then
    local ended = redis.call('LLEN', KEYS[1])
    if over <= ended then
      local left = tonumber(redis.call('LINDEX', KEYS[1], ended - over)) + window - now
      wait = math.max(1, math.ceil(left))
    else
      wait = window
    end
    local dt = math.min(math.max(0, now - grown) / 1000, MAX_ACCRUE)
    if rate < ceiling - 1 then
      rate = math.min(rate + math.max(MIN_FAST, rate * FAST) * dt, ceiling - 1)
    else
      rate = rate + math.max(MIN_STEP, rate * GROW) * dt
    end
    redis.call('HSET', KEYS[3], 'rate', tostring(rate), 'grown', tostring(now))
  end
end
if wait > 0 then return reply(wait) end
for i = 1, calls do redis.call('ZADD', KEYS[2], now + lease, member .. '#' .. i) end
redis.call('PEXPIRE', KEYS[2], lease)
return reply(0)
"""
)

# A 429: the rate cut from the calls in the window (one cut per burst).
# Returns {1 if a rate paces the node now else 0, rate, ms since its cut, ceiling}.
LEARN = (
    _STATE
    + """
if rate and now - cut < CUT_EVERY then return reply(1) end
if not rate and used < MIN_SEEN then return reply(0) end
local base = used
if rate then
  if used > 0 then base = math.min(rate, used) else base = rate end
end
rate = math.max(1, base * CUT)
cut, ceiling = now, base
redis.call('HSET', KEYS[3], 'rate', tostring(rate), 'cut', tostring(now), 'grown', tostring(now),
  'ceiling', tostring(ceiling))
redis.call('PEXPIRE', KEYS[3], FORGET + 1000)
return reply(1)
"""
)


def keys(key: Callable[..., str], endpoint: str) -> tuple[str, str, str]:
    """The node's window (as ``shared_budgets``) and its learned rate."""
    return (
        key("ub", endpoint, "ended"),
        key("ub", endpoint, "open"),
        key("ub", endpoint, "learned"),
    )


def take_args(calls: int, paced: bool, member: str, lease_ms: int) -> tuple[Any, ...]:
    counted = min(max(1, calls), MAX_COUNTED)
    return (*learned.args(), _WINDOW_MS, counted, int(paced), member, lease_ms)


def learn_args() -> tuple[Any, ...]:
    return (*learned.args(), _WINDOW_MS)


def mirror(local: Budgets, endpoint: str, reply: Sequence[Any]) -> int:
    """A script's reply ``{n, rate, ms since its cut, ceiling}`` copied into
    this process's book (``Budgets``, on its own clock); ``n``."""
    n, rate, age_ms, ceiling = int(reply[0]), float(reply[1]), float(reply[2]), float(reply[3])
    node = local.node(endpoint)
    now = local.clock()
    if rate < 0:
        node.learned = None
    else:
        grown = node.learned.grown_at if node.learned is not None else now
        node.learned = Learned(rate, now - age_ms / 1000, grown, ceiling)
    return n
