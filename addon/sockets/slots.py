"""How many WebSockets a client holds open at once, so no client can hoard
sockets (each costs the proxy memory and file descriptors).

A slot is a lease: taken at the handshake, given back when the socket closes,
and renewed while it stays open (``renew``, every ``LEASE_S / 3``). A proxy
that dies therefore leaks nothing for ever: its leases run out after
``LEASE_S``. With Redis the slots of a client are one sorted set for the whole
deployment (member: proxy and socket, score: lease end), decided by one Lua
script per handshake; without it (or while its link is down) each process
counts its own.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from addon.redislink.link import RedisLink, RedisUnavailable
from addon.rpc.jsonrpc import LIMIT_EXCEEDED, error_obj

log = logging.getLogger("chainproxy")

LEASE_S = 60.0
RETRY_AFTER_S = 10  # what a refused handshake is told: sockets close at their clients' pace

# KEYS[1]: the client's set. ARGV: now (ms), lease end (ms), cap, member.
# Returns {taken (1/0), slots held after}.
_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local held = redis.call('ZCARD', KEYS[1])
if held >= tonumber(ARGV[3]) then return {0, held} end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return {1, held + 1}
"""
# KEYS: the clients' sets; ARGV: lease end (ms), then one member per key.
_RENEW = """
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', ARGV[1], ARGV[i + 1])
  redis.call('PEXPIREAT', key, ARGV[1])
end
return #KEYS
"""


class SocketSlots:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock  # wall clock: leases in Redis are compared across machines
        self._local: dict[str, dict[str, float]] = {}  # client -> socket id -> lease end
        # this process's sockets: socket id -> (client, when its slot was taken)
        self._held: dict[str, tuple[str, float]] = {}
        self.link: RedisLink | None = None
        self._member_prefix = f"{socket.gethostname()}:{os.getpid()}:"
        self._acquire_sha = ""
        self._renew_sha = ""
        self._tasks: set[asyncio.Future[None]] = set()  # releases on their way to Redis

    def use_redis(self, link: RedisLink) -> None:
        self.link = link
        self._acquire_sha = link.pipe.script(_ACQUIRE)
        self._renew_sha = link.pipe.script(_RENEW)

    def held(self, client: str) -> int:
        """Sockets this process holds for ``client``."""
        return sum(1 for c, _ in self._held.values() if c == client)

    def acquire(self, client: str, sock_id: str, cap: int) -> bool | Awaitable[bool]:
        """Take a slot for a new socket (True), or say the client holds ``cap``."""
        link = self.link
        if link is not None and link.up:
            return self._acquire_shared(link, client, sock_id, cap)
        if link is not None:
            link.fallback("sockets")
        return self._acquire_local(client, sock_id, cap)

    def _acquire_local(self, client: str, sock_id: str, cap: int) -> bool:
        now = self._clock()
        leases = self._local.setdefault(client, {})
        for sid in [s for s, end in leases.items() if end <= now]:
            del leases[sid]
        if len(leases) >= cap:
            return False
        leases[sock_id] = now + LEASE_S
        self._hold(sock_id, client)
        return True

    async def _acquire_shared(self, link: RedisLink, client: str, sock_id: str, cap: int) -> bool:
        now = self._clock()
        command = (
            "EVALSHA",
            self._acquire_sha,
            1,
            link.key("ws", client),
            int(now * 1000),
            int((now + LEASE_S) * 1000),
            cap,
            self._member_prefix + sock_id,
        )
        try:
            taken, _ = await link.run("sockets", lambda: link.pipe.submit(*command))
        except RedisUnavailable:
            return self._acquire_local(client, sock_id, cap)
        if taken:
            self._hold(sock_id, client)
        return bool(taken)

    def _hold(self, sock_id: str, client: str) -> None:
        self._held[sock_id] = (client, self._clock())

    def release(self, sock_id: str) -> None:
        """A socket closed: its slot is free again, here and in Redis."""
        held = self._held.pop(sock_id, None)
        if held is None:
            return
        client = held[0]
        leases = self._local.get(client)
        if leases is not None:
            leases.pop(sock_id, None)
            if not leases:
                del self._local[client]
        link = self.link
        if link is not None and link.up:
            member = self._member_prefix + sock_id
            key = link.key("ws", client)
            zrem = link.run("sockets", lambda: link.pipe.submit("ZREM", key, member))
            task = asyncio.ensure_future(_quietly(zrem))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def renew(self, open_ids: Collection[str] | None = None) -> None:
        """Extend the leases of every socket this process holds; with
        ``open_ids``, a slot whose socket never opened (its client left during
        the handshake) is given back once it is older than a renewal period."""
        now = self._clock()
        if open_ids is not None:
            stale = [
                sid
                for sid, (_, taken_at) in self._held.items()
                if sid not in open_ids and now - taken_at > LEASE_S / 3
            ]
            for sid in stale:
                self.release(sid)
        end = now + LEASE_S
        for leases in self._local.values():
            for sid in leases:
                leases[sid] = end
        link = self.link
        if link is None or not link.up or not self._held:
            return
        held = [(sid, client) for sid, (client, _) in self._held.items()]
        for start in range(0, len(held), 500):  # bounded script calls
            chunk = held[start : start + 500]
            command = (
                "EVALSHA",
                self._renew_sha,
                len(chunk),
                *(link.key("ws", client) for _, client in chunk),
                int(end * 1000),
                *(self._member_prefix + sid for sid, _ in chunk),
            )
            try:
                await link.run("sockets", functools.partial(link.pipe.submit, *command))
            except RedisUnavailable:
                return  # the local leases stand; Redis's expire by themselves


async def _quietly(op: Awaitable[object]) -> None:
    try:
        await op
    except RedisUnavailable:
        pass  # the lease runs out by itself


def socket_error(cap: int) -> dict[str, Any]:
    """The handshake's refusal of a client at its socket cap."""
    return error_obj(
        None,
        LIMIT_EXCEEDED,
        f"too many WebSockets open: at most {cap} per client",
        {
            "policy": "max_connections",
            "reason": "close a socket you no longer use (one socket carries many calls and "
            "subscriptions), then retry",
            "limit": cap,
            "retry_after": RETRY_AFTER_S,
        },
    )
