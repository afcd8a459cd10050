"""One network's chain as this proxy process follows it: the block tree
(``tree.py``) fed by the hub's merged head subscriptions (best and finalized
heads, ``addon/subs/hub.py``), which survive any node's death.

* Started when the first follow on the network opens; it lingers after the
  last one goes (a client that reconnects finds it warm), then unsubscribes.
* A head whose parent is not in the tree has its missing ancestors fetched
  by hash first (``chain_getHeader``), so each block is announced after its
  parent. Each block's runtime is read (``state_getRuntimeVersion`` at its
  hash, a cached block-pinned read) before the block is announced.
* Events go to the listeners (the follows) in the order they happen; one
  worker handles the notifications, so nothing interleaves.
* When the tree cannot be kept (a gap deeper than ``MAX_ANCESTRY`` blocks,
  finality on another chain), the listeners are told to stop (a follow's
  ``stop``: its client follows again) and the tree is rebuilt.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from addon.chain.header_hash import encode_header, header_hash
from addon.follow.events import runtime_spec
from addon.follow.tree import Block, BlockTree, UnknownParent
from addon.rpc.blocks import is_block_hash, parse_height
from addon.rpc.new_spec import CallFailed, LegacyCaller
from addon.rpc.sub_methods import SUBSCRIBE, SubKind
from addon.subs.hub import OWN_PREFIX, NoUpstream, OwnSubscriber, SubscriptionHub
from common.jsontext import loads

log = logging.getLogger("chainproxy.follow")

MAX_ANCESTRY = 256  # missing ancestors fetched for one head; deeper: rebuild
MAX_UNFINALIZED = 4096  # blocks above the finalized one; more: finality stalled, rebuild
RETRIES_S = (0.25, 0.5, 1.0, 2.0, 0.0)  # a block's header or runtime asked again after these
# best heads in a row whose chain meets ours only below finality: the node feeding
# them follows another fork (a lone late head of a lost fork is one), so the
# shared new-heads subscription leaves it (``SubscriptionHub.distrust``)
FORK_STRIKES = 2
_KINDS: tuple[SubKind, ...] = (
    SUBSCRIBE["chain_subscribeNewHeads"],
    SUBSCRIBE["chain_subscribeFinalizedHeads"],
)


class Listener(Protocol):
    """A follow, as the view tells it what happens."""

    def new_block(self, block: Block, new_runtime: Any) -> None: ...

    def best_changed(self, block_hash: str) -> None: ...

    def finalized(self, hashes: list[str], pruned: list[str]) -> None: ...

    def stop(self, reason: str) -> None: ...


class NetworkView:
    def __init__(
        self,
        network: str,
        hub: SubscriptionHub,
        legacy: Callable[[], LegacyCaller | None],
        *,
        on_stop: Callable[[str], None] | None = None,
    ) -> None:
        self.network = network
        self.hub = hub
        self._legacy = legacy
        self.tree: BlockTree | None = None
        self.listeners: set[Listener] = set()
        self.ready = asyncio.Event()  # set while a tree is held
        self.rebuilds = 0
        self._owner = OwnSubscriber(client=f"{OWN_PREFIX}view:{network}")
        self._shared: dict[str, Any] = {}  # the hub's shared subscription, by kind
        self._off_fork = 0  # best heads in a row on a fork below finality
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._on_stop = on_stop  # a metric: follows stopped, by reason

    # --- life ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
        for sub_id in list(self._owner.subscriptions):
            self.hub.unsubscribe(sub_id, self._owner)
        self._owner.subscriptions.clear()
        self.ready.clear()

    async def _run(self) -> None:
        delay = 0.5
        while True:
            try:
                await self._subscribe()
                await self._build()
                delay = 0.5
                while True:
                    kind, header = await self._queue.get()
                    await self._take(kind, header)
            except asyncio.CancelledError:
                raise
            except (NoUpstream, CallFailed, _Rebuild) as e:
                self._reset(str(e))
            except Exception:
                log.exception("%s: the chain view failed", self.network)
                self._reset("internal error")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _subscribe(self) -> None:
        if self._owner.subscriptions:
            return
        for kind in _KINDS:
            shared, sub = await self.hub.subscribe(
                self.network, kind, [], self._receiver(kind.kind), self._owner
            )
            self._owner.subscriptions[sub.sub_id] = kind.subscribe
            self._shared[kind.kind] = shared
            shared.greet(sub)  # the current head comes at once, then each new one

    def _receiver(self, kind: str) -> Callable[[bytes], None]:
        def receive(frame: bytes) -> None:
            try:
                header = loads(frame)["params"]["result"]
            except (ValueError, KeyError, TypeError):
                return
            self._queue.put_nowait((kind, header))

        return receive

    # --- the tree -----------------------------------------------------------------------

    async def _build(self) -> None:
        """A tree rooted at the finalized block the nodes report now."""
        if self.tree is not None:
            return
        fin = await self._call("chain_getFinalizedHead", [])
        if not is_block_hash(fin):
            raise _Rebuild("no finalized head")
        header = await self._header(fin)
        number = parse_height(header.get("number"))
        assert number is not None  # _header checked
        root = Block(fin.lower(), str(header.get("parentHash", "")).lower(), number)
        root.header = _encoded(header)
        root.runtime = await self._runtime(root.hash)
        self.tree = BlockTree(root)
        self.ready.set()

    async def _take(self, kind: str, header: Any) -> None:
        tree = self.tree
        assert tree is not None
        h = header_hash(header)
        number = parse_height(header.get("number")) if isinstance(header, dict) else None
        if h is None or number is None or number <= tree.root.number:
            return  # not a header we can place, or at/below the finalized block
        placed = await self._place(h, header)
        if kind == "new_heads":
            self._fork_strike(placed)
            if placed and tree.set_best(h):
                for listener in list(self.listeners):
                    listener.best_changed(h)
        elif kind == "finalized_heads":
            self._finalize(h)
        if len(tree.blocks) > MAX_UNFINALIZED:
            raise _Rebuild(f"more than {MAX_UNFINALIZED} blocks above the finalized one")

    def _fork_strike(self, placed: bool) -> None:
        """A best head on a fork below finality is a strike against the node
        feeding them; ``FORK_STRIKES`` in a row move the subscription to
        another node (it goes on from there: nothing is missed)."""
        self._off_fork = 0 if placed else self._off_fork + 1
        if self._off_fork < FORK_STRIKES:
            return
        self._off_fork = 0
        shared = self._shared.get("new_heads")
        if shared is not None:
            self.hub.distrust(shared, "its best heads are on a fork below finality")

    async def _place(self, block_hash: str, header: dict[str, Any]) -> bool:
        """Add the block and its missing ancestors, parent first; False when
        its chain meets ours only below finality (another fork: ignored)."""
        tree = self.tree
        assert tree is not None
        chain: list[tuple[str, dict[str, Any]]] = []
        h, hdr = block_hash, header
        while h not in tree:
            chain.append((h, hdr))
            parent = str(hdr.get("parentHash", "")).lower()
            n = parse_height(hdr.get("number"))
            if parent in tree:
                break
            if n is None or n - 1 <= tree.root.number or len(chain) > MAX_ANCESTRY:
                # its chain does not meet ours above the finalized block
                if len(chain) > MAX_ANCESTRY:
                    raise _Rebuild(f"a gap of more than {MAX_ANCESTRY} blocks")
                return False  # a fork below finality (a late head from a node): ignored
            hdr = await self._header(parent)
            h = parent
        for bh, bhdr in reversed(chain):
            n = parse_height(bhdr.get("number"))
            assert n is not None
            parent = str(bhdr.get("parentHash", "")).lower()
            block = Block(bh, parent, n, await self._runtime(bh), _encoded(bhdr))
            try:
                tree.add(block)
            except UnknownParent as e:
                raise _Rebuild(str(e)) from None
            before = tree.blocks[parent].runtime if parent in tree else None
            changed = block.runtime if block.runtime != before else None
            for listener in list(self.listeners):
                listener.new_block(block, changed)
        return True

    def _finalize(self, block_hash: str) -> None:
        tree = self.tree
        assert tree is not None
        best_before = tree.best
        try:
            hashes, pruned = tree.finalize(block_hash)
        except UnknownParent as e:
            raise _Rebuild(str(e)) from None
        if not hashes:
            return
        if tree.best != best_before:
            # the best block was pruned (or finalized below the last hash): the
            # spec wants the new best announced before the finalized event
            for listener in list(self.listeners):
                listener.best_changed(tree.best)
        for listener in list(self.listeners):
            listener.finalized(hashes, pruned)

    def _reset(self, reason: str) -> None:
        if self.tree is not None:
            log.warning("%s: chain view rebuilt: %s", self.network, reason)
            self.rebuilds += 1
        self.tree = None
        self.ready.clear()
        for listener in list(self.listeners):
            listener.stop(reason)
        self.listeners.clear()
        if self._on_stop is not None:
            self._on_stop(reason)

    # --- legacy calls -------------------------------------------------------------------

    async def _call(self, method: str, params: list[Any]) -> Any:
        legacy = self._legacy()
        if legacy is None:
            raise CallFailed(-32603, "chainproxy is not configured")
        return await legacy.call(self.network, method, params)

    async def _patiently(self, what: str, fetch: Callable[[], Awaitable[Any]]) -> Any:
        """A block just announced by one node may not be imported by the node
        a call reaches yet (it answers null, or "unknown block"): asked again a
        few times over about 4 s before the view gives up and rebuilds."""
        last = ""
        for delay in RETRIES_S:
            try:
                got = await fetch()
            except CallFailed as e:
                last = e.message
            else:
                if got is not None:
                    return got
                last = "no node had it"
            await asyncio.sleep(delay)
        raise _Rebuild(f"{what}: {last}")

    async def _header(self, block_hash: str) -> dict[str, Any]:
        async def fetch() -> dict[str, Any] | None:
            header = await self._call("chain_getHeader", [block_hash])
            if not isinstance(header, dict) or parse_height(header.get("number")) is None:
                return None
            got = header_hash(header)
            if got is not None and got != block_hash.lower():
                return None  # another block (chopsticks answers an unknown hash with genesis)
            return header

        return await self._patiently(f"the header of {block_hash}", fetch)

    async def _runtime(self, block_hash: str) -> Any:
        async def fetch() -> Any:
            got = await self._call("state_getRuntimeVersion", [block_hash])
            return runtime_spec(got) if isinstance(got, dict) else None

        return await self._patiently(f"the runtime at {block_hash}", fetch)


class _Rebuild(Exception):
    pass


def _encoded(header: dict[str, Any]) -> str | None:
    """The header as ``chainHead_v1_header`` gives it (hex SCALE)."""
    raw = encode_header(header)
    return "0x" + raw.hex() if raw is not None else None
