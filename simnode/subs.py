"""Read subscriptions on a simulated node's WebSocket, in Substrate's wire
format: new, all and finalized heads, runtime version, storage.

Each socket has its own ``Subscriptions``; a ticker watches the chain and
sends what changed, each height once and in order, as a node does. A new
subscription gets the current value at once (the current head, the runtime
version, the storage values); a runtime version subscription is notified
again when the best block runs another runtime (an ``upgrade_at`` crossed).
Faults act through the chain: ``freeze`` stops the heads, ``lag`` holds the
best block back; ``mute`` (``muted()``) sends nothing while the chain goes
on: the socket stays open and answers calls, a silent feed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .chain import Chain
from .rpc import Call, Dispatcher, RpcError

# subscribe method -> (notification method, kind); unsubscribe -> kind
SUBSCRIBE: dict[str, tuple[str, str]] = {
    "chain_subscribeNewHeads": ("chain_newHead", "best"),
    "chain_subscribeNewHead": ("chain_newHead", "best"),
    "subscribe_newHead": ("chain_newHead", "best"),
    "chain_subscribeAllHeads": ("chain_allHead", "best"),
    "chain_subscribeFinalizedHeads": ("chain_finalizedHead", "finalized"),
    "chain_subscribeFinalisedHeads": ("chain_finalizedHead", "finalized"),
    "state_subscribeRuntimeVersion": ("state_runtimeVersion", "runtime"),
    "chain_subscribeRuntimeVersion": ("state_runtimeVersion", "runtime"),
    "state_subscribeStorage": ("state_storage", "storage"),
}
UNSUBSCRIBE = frozenset(
    {
        "chain_unsubscribeNewHeads",
        "chain_unsubscribeNewHead",
        "unsubscribe_newHead",
        "chain_unsubscribeAllHeads",
        "chain_unsubscribeFinalizedHeads",
        "chain_unsubscribeFinalisedHeads",
        "state_unsubscribeRuntimeVersion",
        "chain_unsubscribeRuntimeVersion",
        "state_unsubscribeStorage",
    }
)
_ids = itertools.count(1)


def is_subscription_call(entry: Any) -> bool:
    return isinstance(entry, Call) and (entry.method in SUBSCRIBE or entry.method in UNSUBSCRIBE)


@dataclass
class _Sub:
    notification: str
    kind: str
    keys: list[str] = field(default_factory=list)
    last: int | None = None  # highest height sent (heads)
    values: dict[str, Any] = field(default_factory=dict)  # storage key -> value sent


class Subscriptions:
    def __init__(
        self,
        chain: Chain,
        dispatcher: Dispatcher,
        send: Callable[[str], Awaitable[None]],
        *,
        tick_s: float,
        on_change: Callable[[int], None],
        muted: Callable[[], bool] = lambda: False,
    ) -> None:
        self.chain = chain
        self.dispatcher = dispatcher
        self._send = send
        self._tick = tick_s
        self._on_change = on_change  # +1 / -1: the node's count of live subscriptions
        self._muted = muted  # nothing is pushed (what would have been is skipped)
        self.subs: dict[str, _Sub] = {}
        self._ticker: asyncio.Task[None] | None = None

    def answer(self, entry: Call) -> tuple[dict[str, Any], str | None]:
        """The answer to a (un)subscribe call, and the new subscription's id."""
        if entry.method in UNSUBSCRIBE:
            params = entry.params if isinstance(entry.params, list) else []
            gone = self.subs.pop(str(params[0]), None) if params else None
            if gone is not None:
                self._on_change(-1)
            return {"jsonrpc": "2.0", "id": entry.id, "result": gone is not None}, None
        notification, kind = SUBSCRIBE[entry.method]
        keys: list[str] = []
        if kind == "storage":
            params = entry.params if isinstance(entry.params, list) else []
            keys = params[0] if params and isinstance(params[0], list) else []
            if not keys or not all(isinstance(k, str) for k in keys):
                err = {"code": -32602, "message": "Invalid params: storage keys"}
                return {"jsonrpc": "2.0", "id": entry.id, "error": err}, None
        sub_id = f"sim{next(_ids):06d}"
        self.subs[sub_id] = _Sub(notification, kind, keys)
        self._on_change(+1)
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._run())
        return {"jsonrpc": "2.0", "id": entry.id, "result": sub_id}, sub_id

    async def initial(self, sub_id: str) -> None:
        """The current value, right after the answer (as a node sends it)."""
        sub = self.subs.get(sub_id)
        if sub is None:
            return
        if sub.kind in ("best", "finalized"):
            n = self._height(sub.kind)
            sub.last = n
            await self._notify(sub_id, sub, self.chain.header(n))
        elif sub.kind == "runtime":
            await self._runtime(sub_id, sub, initial=True)
        else:
            await self._storage(sub_id, sub, initial=True)

    def _height(self, kind: str) -> int:
        return self.chain.best() if kind == "best" else self.chain.finalized()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._tick)
            for sub_id, sub in list(self.subs.items()):
                if sub.kind in ("best", "finalized") and sub.last is not None:
                    top = self._height(sub.kind)
                    while sub.last < top and sub_id in self.subs:
                        sub.last += 1
                        await self._notify(sub_id, sub, self.chain.header(sub.last))
                elif sub.kind == "storage":
                    await self._storage(sub_id, sub, initial=False)
                elif sub.kind == "runtime":
                    await self._runtime(sub_id, sub, initial=False)

    async def _runtime(self, sub_id: str, sub: _Sub, *, initial: bool) -> None:
        """The best block's runtime version, when it is not the one last sent."""
        version = self.dispatcher.call("state_getRuntimeVersion", [])
        if initial or sub.values.get("version") != version:
            sub.values["version"] = version
            await self._notify(sub_id, sub, version)

    async def _storage(self, sub_id: str, sub: _Sub, *, initial: bool) -> None:
        best = self.chain.best()
        if not initial and sub.last == best:
            return
        sub.last = best
        changes = []
        for key in sub.keys:
            try:
                value = self.dispatcher.call("state_getStorage", [key])
            except RpcError:
                value = None
            if initial or sub.values.get(key, object()) != value:
                changes.append([key, value])
                sub.values[key] = value
        if changes:
            result = {"block": self.chain.block_hash(best), "changes": changes}
            await self._notify(sub_id, sub, result)

    async def _notify(self, sub_id: str, sub: _Sub, result: Any) -> None:
        if self._muted():
            return
        doc = {
            "jsonrpc": "2.0",
            "method": sub.notification,
            "params": {"subscription": sub_id, "result": result},
        }
        await self._send(json.dumps(doc, separators=(",", ":")))

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        if self.subs:
            self._on_change(-len(self.subs))
        self.subs.clear()
