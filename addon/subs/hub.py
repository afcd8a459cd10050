"""All shared subscriptions of the process and the upstream sockets under them.

* One ``SharedSubscription`` per distinct (network, method, canonical params),
  shared by every client subscription asking for it.
* Upstream sockets (one per node endpoint, many subscriptions each) are
  chosen by the same tiers and latency rule as HTTP calls, from the pool of
  the network's ``node-wss`` endpoints: a lagging or unhealthy node is taken
  only when nothing better is left.
* A socket that closes or errors moves its subscriptions to the next-best
  node; clients keep their ids and the sequencer fills the gap. So does a
  silent one: a head subscription on it saw no notification for ``stall_s``
  while the network advanced (the probes, or other subscriptions' heads):
  every subscription on that socket moves, and the node is avoided for
  subscriptions until it pushes again (``addon/subs/silence.py``).
* A subscription with no subscriber left is unsubscribed upstream after
  ``linger_s`` (a client that reconnects at once finds it still live).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from addon.rpc.sub_methods import SubKind, share_key
from addon.subs.fanout import SharedSubscription, Subscriber
from addon.subs.silence import Canary, SilentNodes
from addon.subs.upstream import UpstreamError, UpstreamSocket
from addon.subs.watchdog import Watchdog
from addon.upstream.pool import Upstream, UpstreamPool

log = logging.getLogger("chainproxy.subs")


class NoUpstream(Exception):
    pass


class ChainView(Protocol):
    """What the hub needs of the proxy around it (the addon's ``Runtime``)."""

    @property
    def session(self) -> aiohttp.ClientSession | None: ...

    def heights(self, network: str) -> tuple[int | None, int | None]:
        """(tip, finalized) from the probes; None where unknown."""
        ...

    def head_delivered(self, network: str, header: Any) -> None:
        """A new best head reached clients (head pinning learns it)."""
        ...

    def subscription_moved(self, network: str) -> None:
        """A shared subscription moved to another node (a metric)."""
        ...

    def upstream_silent(self, endpoint: str) -> None:
        """A node's subscription socket went silent (a metric)."""
        ...


@dataclass(frozen=True, slots=True)
class HubSettings:
    linger_s: float = 30.0
    stall_s: float = 24.0  # two block times: a head subscription this quiet is left
    call_timeout_s: float = 10.0
    establish_s: float = 15.0  # a first subscribe waits this long for a node
    retry_max_s: float = 5.0


class SubscriptionHub(Watchdog):
    def __init__(
        self,
        pools: Mapping[str, UpstreamPool],
        chain: ChainView,
        *,
        clock: Callable[[], float],
        settings: HubSettings = HubSettings(),
    ) -> None:
        self.pools = pools
        self.chain = chain
        self._clock = clock
        self.settings = settings
        self.shared: dict[str, SharedSubscription] = {}
        self.by_id: dict[str, SharedSubscription] = {}  # client subscription id -> shared
        self.per_client: dict[str, int] = {}  # client -> subscriptions across its sockets
        # subscribes waiting for a node, by id(socket) (an owner may be
        # unhashable) and by client: the limits count them
        self.opening: dict[int, int] = {}
        self.client_opening: dict[str, int] = {}
        self.sockets: dict[str, UpstreamSocket] = {}  # endpoint id -> socket
        self._connecting: dict[str, asyncio.Task[UpstreamSocket]] = {}
        self._watchdog: asyncio.Task[None] | None = None
        self.silent = SilentNodes()  # nodes whose socket went silent, until they push
        self.stopping = False  # the process is going: sockets closing now are not failures

    # --- clients ----------------------------------------------------------------------------

    async def subscribe(
        self,
        network: str,
        kind: SubKind,
        params: list[Any],
        send: Callable[[bytes], None],
        owner: object,
    ) -> tuple[SharedSubscription, Subscriber]:
        """A new client subscription (its id in ``Subscriber.sub_id``). Raises
        ``NoUpstream`` when no node could take a new upstream subscription in
        time. The caller answers the client, then calls ``shared.greet``."""
        if not self.serves(network):
            raise NoUpstream(f"no node-wss endpoint configured for network {network}")
        client = _client_of(owner)
        _count(self.opening, id(owner), 1)
        _count(self.client_opening, client, 1)
        try:
            key = share_key(network, kind, params)
            sh = self.shared.get(key)
            if sh is None:
                sh = SharedSubscription(
                    key,
                    network,
                    kind,
                    params,
                    clock=self._clock,
                    call_timeout_s=self.settings.call_timeout_s,
                    on_deliver=self._head_delivered if kind.kind == "new_heads" else None,
                )
                self.shared[key] = sh
                sh.start()
                self._move(sh, "new")
            if sh.linger is not None:
                sh.linger.cancel()
                sh.linger = None
            if not sh.live.is_set() and sh.delivered == 0:
                # a new upstream subscription: answer only once a node took it
                try:
                    taken = await sh.taken(self.settings.establish_s)
                except asyncio.CancelledError:  # its socket closed: held by nobody, it goes
                    if not sh.subscribers and not sh.waiting and sh.linger is None:
                        self._linger(sh)
                    raise
                if not taken:
                    if not sh.subscribers and not sh.waiting:
                        await self._drop(sh)
                    raise NoUpstream(
                        f"no node took the subscription within {self.settings.establish_s:g}s"
                    )
            sub = Subscriber(secrets.token_hex(8), send, owner)
            sh.subscribers[sub.sub_id] = sub
            self.by_id[sub.sub_id] = sh
            self.per_client[client] = self.per_client.get(client, 0) + 1
            self._ensure_watchdog()
            return sh, sub
        finally:
            _count(self.opening, id(owner), -1)
            _count(self.client_opening, client, -1)

    def client_subscriptions(self, client: str) -> int:
        """Subscriptions ``client`` holds across its sockets on this proxy."""
        return self.per_client.get(client, 0)

    def heads_live(self, network: str) -> bool:
        """Whether ``network``'s shared new-heads subscription holds on a node and
        has delivered a head (``head_watch.py``: the head book follows the chain)."""
        sh = self.shared.get(f"{network}|chain_subscribeNewHeads|[]")  # share_key's form
        return sh is not None and sh.delivered > 0 and sh.live.is_set()

    def serves(self, network: str) -> bool:
        """Whether the config gives ``network`` any node-wss endpoint at all."""
        pool = self.pools.get(network)
        return pool is not None and len(pool) > 0

    def release(self, sock: Any) -> None:
        """A client socket closed: all of its subscriptions go."""
        for sub_id in list(sock.subscriptions):
            self.unsubscribe(sub_id, sock)
        sock.subscriptions.clear()

    def unsubscribe(self, sub_id: str, owner: object) -> bool:
        """True when ``owner`` held ``sub_id`` (it no longer does)."""
        sh = self.by_id.get(sub_id)
        if sh is None or sh.subscribers.get(sub_id) is None:
            return False
        if sh.subscribers[sub_id].owner is not owner:
            return False
        del sh.subscribers[sub_id]
        del self.by_id[sub_id]
        client = _client_of(owner)
        left = self.per_client.get(client, 1) - 1
        if left > 0:
            self.per_client[client] = left
        else:
            self.per_client.pop(client, None)
        if not sh.subscribers:
            self._linger(sh)
        return True

    def _linger(self, sh: SharedSubscription) -> None:
        """No subscriber: it ends after ``linger_s`` unless one comes back."""
        loop = asyncio.get_running_loop()
        sh.linger = loop.call_later(
            self.settings.linger_s, lambda: loop.create_task(self._expire(sh))
        )

    async def _expire(self, sh: SharedSubscription) -> None:
        if not sh.subscribers and self.shared.get(sh.key) is sh:
            await self._drop(sh)

    async def _drop(self, sh: SharedSubscription) -> None:
        if self.shared.get(sh.key) is sh:  # (a newer one under its key stays)
            del self.shared[sh.key]
        await sh.stop(self._unsubscribe_upstream)

    async def _unsubscribe_upstream(self, socket: UpstreamSocket, sub: str, method: str) -> None:
        await socket.unsubscribe(method, sub)
        if len(socket) == 0 and self.sockets.get(socket.endpoint_id) is socket:
            del self.sockets[socket.endpoint_id]  # no subscription left on it
            await socket.close()

    # --- upstream ---------------------------------------------------------------------------

    def _move(self, sh: SharedSubscription, reason: str, canary: bool = False) -> None:
        """(Re)subscribe ``sh`` on the best node other than the one it leaves
        (``canary``: its subscription there stays, to hear the node again)."""
        if sh.mover is not None and not sh.mover.done():
            return
        left = sh.upstream
        socket, sub = sh.detach()
        if reason not in ("new", "socket-closed") and socket is not None and sub is not None:
            watch = Canary(socket, sub, sh.kind.unsubscribe)
            if canary and self.silent.watch(socket.endpoint_id, watch, self._clock()):
                socket.listen(sub, lambda _result: self._spoke(socket))
            else:
                asyncio.get_running_loop().create_task(
                    self._unsubscribe_upstream(socket, sub, sh.kind.unsubscribe)
                )
        if left is not None:
            log.warning(
                "%s %s: leaving %s (%s), resubscribing elsewhere",
                sh.network,
                sh.kind.subscribe,
                left.id,
                reason,
            )
        sh.mover = asyncio.get_running_loop().create_task(self._establish(sh, left))

    async def _establish(self, sh: SharedSubscription, left: Upstream | None) -> None:
        pool = self.pools.get(sh.network)
        if pool is None:
            return  # the network left the config: nothing to subscribe with
        tried: set[str] = {left.id} if left is not None else set()
        delay = 0.2
        while self.shared.get(sh.key) is sh:
            up = pool.choose(tried | self.silent.avoid()) or pool.choose(tried)
            if up is None and tried:
                tried = set()  # every node tried: start again after a pause
                await asyncio.sleep(delay)
                delay = min(self.settings.retry_max_s, delay * 2)
                continue
            if up is None:
                await asyncio.sleep(delay)
                continue
            tried.add(up.id)
            start = self._clock()
            pool.started(up)
            try:
                socket = await self._socket(up)
                await sh.attach(socket, up)
            except UpstreamError as e:
                pool.failed(up, (self._clock() - start) * 1000)
                log.warning("%s %s on %s failed: %s", sh.network, sh.kind.subscribe, up.id, e)
                continue
            except BaseException:
                pool.abandoned(up)
                raise
            pool.succeeded(up, (self._clock() - start) * 1000)
            if left is not None:
                sh.moves += 1
                self.chain.subscription_moved(sh.network)
            return

    async def _socket(self, up: Upstream) -> UpstreamSocket:
        socket = self.sockets.get(up.id)
        if socket is not None and not socket.closed:
            return socket
        task = self._connecting.get(up.id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._connect(up))
            self._connecting[up.id] = task
            task.add_done_callback(lambda _t: self._connecting.pop(up.id, None))
        return await asyncio.shield(task)

    async def _connect(self, up: Upstream) -> UpstreamSocket:
        session = self.chain.session
        if session is None:
            raise UpstreamError("no HTTP session yet")
        socket = UpstreamSocket(up.id, up.url, on_close=self._socket_closed)
        await socket.connect(session, self.settings.call_timeout_s)
        self.sockets[up.id] = socket
        return socket

    def _socket_closed(self, socket: UpstreamSocket, reason: str) -> None:
        if self.sockets.get(socket.endpoint_id) is socket:
            del self.sockets[socket.endpoint_id]
        self.silent.spoke(socket.endpoint_id, socket)  # a canary's socket: nothing to hear
        if reason == "closed-by-proxy" or self.stopping:
            return
        for sh in list(self.shared.values()):
            if sh.socket is socket:
                pool = self.pools.get(sh.network)
                if sh.upstream is not None and pool is not None:
                    pool.failed(sh.upstream, 1000.0)
                self._move(sh, f"socket {reason}")

    def reconfigure(
        self,
        pools: Mapping[str, UpstreamPool],
        settings: HubSettings,
        chain: ChainView,
    ) -> None:
        """A config reload: new pools, settings and runtime; live subscriptions
        stay where they are until their node fails or leaves the pools."""
        self.pools, self.settings, self.chain = pools, settings, chain
        for sh in list(self.shared.values()):
            pool = pools.get(sh.network)
            if sh.upstream is not None and (pool is None or sh.upstream.id not in pool.upstreams):
                if pool is not None and len(pool):
                    self._move(sh, "endpoint removed from the config")

    def _head_delivered(self, network: str, header: Any) -> None:
        self.chain.head_delivered(network, header)  # the runtime of the moment (reloads)

    def stop(self) -> None:
        """Synchronous (mitmproxy's ``done``): no more moves; the HTTP session's
        close then ends the upstream sockets."""
        self.stopping = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        for sh in self.shared.values():
            if sh.mover is not None:
                sh.mover.cancel()

    async def close(self) -> None:
        self.stop()
        for sh in list(self.shared.values()):
            await self._drop(sh)
        for socket in list(self.sockets.values()):
            await socket.close()
        self.sockets.clear()

    def gauges(self) -> dict[str, dict[str, int]]:
        """Client and upstream subscriptions by (canonical) method."""
        clients: dict[str, int] = {}
        upstream: dict[str, int] = {}
        for sh in self.shared.values():
            m = sh.kind.subscribe
            # the proxy's own (a follow view, the head watch) are not clients'
            ours = sum(1 for sub in sh.subscribers.values() if _ours(sub.owner))
            clients[m] = clients.get(m, 0) + len(sh.subscribers) - ours
            if sh.live.is_set():
                upstream[m] = upstream.get(m, 0) + 1
        return {
            "client_subscriptions": clients,
            "upstream_subscriptions": upstream,
            "upstream_silent": self.silent.gauge(),
        }


def _client_of(owner: object) -> str:
    return str(getattr(owner, "client", ""))


def _count(counts: dict[Any, int], key: Any, n: int) -> None:
    if (left := counts.get(key, 0) + n) > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


OWN_PREFIX = "chainproxy:"  # the client name of the proxy's own subscribers


@dataclass(slots=True)
class OwnSubscriber:
    """A part of the proxy (a follow view, the head watch) as the hub sees a
    subscriber's socket: its client name (``OWN_PREFIX`` + what it is) and the
    subscriptions it holds."""

    client: str
    subscriptions: dict[str, str] = field(default_factory=dict)


def _ours(owner: object) -> bool:
    return _client_of(owner).startswith(OWN_PREFIX)
