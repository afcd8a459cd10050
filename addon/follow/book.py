"""Every ``chainHead_v1_follow`` of this proxy process and the network views
under them (one per network, shared by all its follows: 1,000 follows cost
the nodes the two head subscriptions one costs).

A view starts with the first follow on its network and lingers
``linger_s`` after the last one ends, then leaves its subscriptions; a
network ``hold`` names (``proxy.new_spec.view: always``) is followed from
the start and never left, so head pinning and the pre-warm learn each block
(the view's new-heads subscription tells them, ``subs.hub.ChainView``) even
when no client asks for headers.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mitmproxy.utils.asyncio_utils import create_task

from addon.follow.follow import Follow
from addon.follow.view import NetworkView
from addon.rpc.new_spec import LegacyCaller
from addon.subs.hub import SubscriptionHub

log = logging.getLogger("chainproxy.follow")

Count = Callable[..., None]  # LiveMetrics.count_extra(name, n, **labels)


@dataclass(frozen=True, slots=True)
class FollowSettings:
    follows_per_socket: int = 4
    pinned_blocks: int = 512
    operations: int = 16
    storage_page_items: int = 64
    linger_s: float = 30.0
    start_s: float = 15.0  # a follow waits this long for its network's view, then stops


class FollowBook:
    def __init__(
        self,
        hub: SubscriptionHub,
        legacy: Callable[[], LegacyCaller | None],
        count: Count,
        settings: FollowSettings = FollowSettings(),
    ) -> None:
        self.hub = hub
        self.legacy = legacy
        self.count = count
        self.settings = settings
        self.views: dict[str, NetworkView] = {}
        self.follows: dict[str, Follow] = {}
        self.per_client: dict[str, int] = {}
        self._lingers: dict[str, asyncio.TimerHandle] = {}
        self.held: frozenset[str] = frozenset()  # networks followed always

    # --- follows ------------------------------------------------------------------------

    def on_socket(self, sock: Any) -> int:
        return sum(1 for f in self.follows.values() if f.owner is sock)

    def client_follows(self, client: str) -> int:
        return self.per_client.get(client, 0)

    def open(self, network: str, sock: Any, with_runtime: bool) -> Follow:
        """A new follow (its id in ``Follow.id``); ``begin`` sends its first
        events once the network's view holds a tree."""
        s = self.settings
        follow = Follow(
            secrets.token_hex(8),
            network,
            sock,
            sock.send,
            with_runtime=with_runtime,
            max_pinned=s.pinned_blocks,
            max_operations=s.operations,
            on_end=self._ended,
        )
        self.follows[follow.id] = follow
        client = str(getattr(sock, "client", ""))
        self.per_client[client] = self.per_client.get(client, 0) + 1
        linger = self._lingers.pop(network, None)
        if linger is not None:
            linger.cancel()
        self._view(network).start()
        return follow

    async def begin(self, follow: Follow) -> None:
        view = self.views.get(follow.network)
        if view is None or follow.ended:
            return
        try:
            async with asyncio.timeout(self.settings.start_s):
                await view.ready.wait()
        except TimeoutError:
            follow.stop(f"no node gave the chain's head within {self.settings.start_s:g}s")
            return
        if follow.ended or view.tree is None:
            return
        follow.start(view.tree)
        view.listeners.add(follow)

    def get(self, follow_id: Any, sock: Any) -> Follow | None:
        """The socket's live follow with that id (another socket's is not its)."""
        follow = self.follows.get(follow_id) if isinstance(follow_id, str) else None
        if follow is None or follow.owner is not sock or follow.ended:
            return None
        return follow

    def release(self, sock: Any) -> None:
        """A client socket closed: its follows end."""
        for follow in [f for f in self.follows.values() if f.owner is sock]:
            follow.end("socket closed")

    def _ended(self, follow: Follow, reason: str) -> None:
        self.follows.pop(follow.id, None)
        client = str(getattr(follow.owner, "client", ""))
        left = self.per_client.get(client, 1) - 1
        if left > 0:
            self.per_client[client] = left
        else:
            self.per_client.pop(client, None)
        subs = getattr(follow.owner, "subscriptions", None)
        if isinstance(subs, dict) and subs.pop(follow.id, None) is not None:
            changed = getattr(follow.owner, "changed", None)
            if callable(changed):
                changed()
        view = self.views.get(follow.network)
        if view is not None:
            view.listeners.discard(follow)
            if not any(f.network == follow.network for f in self.follows.values()):
                self._linger(follow.network)
        if reason not in ("unfollowed", "socket closed"):
            self.count("chainproxy_follow_stops_total", network=follow.network, reason=_why(reason))

    # --- views --------------------------------------------------------------------------

    def hold(self, networks: frozenset[str]) -> None:
        """Follow ``networks`` from now on, whatever the follows (a config's
        ``view: always``); a network no longer held lingers like any view."""
        released = self.held - networks
        self.held = networks
        for network in networks:
            linger = self._lingers.pop(network, None)
            if linger is not None:
                linger.cancel()
            self._view(network).start()
        for network in released:
            if not any(f.network == network for f in self.follows.values()):
                self._linger(network)

    def _view(self, network: str) -> NetworkView:
        view = self.views.get(network)
        if view is None:
            view = NetworkView(network, self.hub, self.legacy)
            self.views[network] = view
        return view

    def _linger(self, network: str) -> None:
        loop = asyncio.get_running_loop()
        old = self._lingers.pop(network, None)
        if old is not None:
            old.cancel()

        def expire() -> None:
            self._lingers.pop(network, None)
            view = self.views.get(network)
            if view is not None and not view.listeners and network not in self.held:
                del self.views[network]
                create_task(view.close(), name="chainproxy: leave a chain view", keep_ref=True)

        self._lingers[network] = loop.call_later(self.settings.linger_s, expire)

    async def close(self) -> None:
        for follow in list(self.follows.values()):
            follow.end("socket closed")
        for handle in self._lingers.values():
            handle.cancel()
        for view in list(self.views.values()):
            await view.close()
        self.views.clear()

    def open_follows(self) -> int:
        return len(self.follows)

    def pinned(self) -> dict[str, int]:
        """Blocks pinned by the follows, per network (a gauge)."""
        out: dict[str, int] = {}
        for f in self.follows.values():
            out[f.network] = out.get(f.network, 0) + len(f.pinned)
        return out


def _why(reason: str) -> str:
    """A reason as a metric label (few values)."""
    if reason.startswith("more than") and "pinned" in reason:
        return "pinned_blocks"
    if reason.startswith("no node gave"):
        return "no_head"
    return "view_rebuilt"
