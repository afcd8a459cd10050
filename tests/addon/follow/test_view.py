"""The network view (one unit, with a fake hub and fake legacy calls): missing
ancestors fetched parent first, runtimes read per block, the best block
announced before a finalized event that prunes it, and a rebuild that stops
the follows when the chain cannot be followed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from addon.chain.header_hash import header_hash
from addon.follow.tree import Block
from addon.follow.view import NetworkView
from addon.rpc.new_spec import CallFailed

ZERO = "0x" + "00" * 32


def header(number: int, parent: str, salt: str = "") -> dict[str, Any]:
    root = "0x" + f"{number:08x}{salt}".encode().hex()[:64].ljust(64, "0")
    return {
        "parentHash": parent,
        "number": hex(number),
        "stateRoot": root,
        "extrinsicsRoot": root,
        "digest": {"logs": []},
    }


class Chain:
    """Headers by hash, a finalized head, runtimes by hash."""

    def __init__(self) -> None:
        self.headers: dict[str, dict[str, Any]] = {}
        self.finalized = ""
        self.spec: dict[str, int] = {}
        self.calls: list[tuple[str, Any]] = []
        self.not_yet = 0  # runtime reads answered "unknown block" first (not imported yet)

    def grow(self, parent: str, start: int, count: int, salt: str = "") -> list[str]:
        out = []
        for n in range(start, start + count):
            h = header(n, parent, salt)
            parent = header_hash(h) or ""
            self.headers[parent] = h
            out.append(parent)
        return out

    async def call(self, network: str, method: str, params: list[Any]) -> Any:
        self.calls.append((method, params))
        if method == "chain_getFinalizedHead":
            return self.finalized
        if method == "chain_getHeader":
            got = self.headers.get(params[0])
            if got is None:
                raise CallFailed(-32000, "unknown block")
            return got
        if method == "state_getRuntimeVersion" and self.not_yet > 0:
            self.not_yet -= 1
            raise CallFailed(-32000, "Client error: UnknownBlock")
        if method == "state_getRuntimeVersion":
            return {
                "specName": "x",
                "implName": "x",
                "specVersion": self.spec.get(params[0], 1),
                "implVersion": 1,
                "apis": [["0xdf6acb689907609b", 5]],
                "transactionVersion": 1,
            }
        raise AssertionError(method)


class Hub:
    def __init__(self) -> None:
        self.sends: dict[str, Any] = {}
        self.distrusted: list[str] = []  # why the new-heads subscription was moved

    async def subscribe(self, network: str, kind: Any, params: Any, send: Any, owner: Any) -> Any:
        self.sends[kind.kind] = send

        class Shared:
            def greet(self, sub: Any) -> None:
                pass

        class Sub:
            sub_id = kind.kind

        return Shared(), Sub()

    def unsubscribe(self, sub_id: str, owner: Any) -> bool:
        return True

    def distrust(self, shared: Any, reason: str) -> None:
        self.distrusted.append(reason)

    def push(self, kind: str, h: dict[str, Any]) -> None:
        frame = {"jsonrpc": "2.0", "method": "x", "params": {"subscription": "s", "result": h}}
        self.sends[kind](json.dumps(frame).encode())


class Listener:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def new_block(self, block: Block, new_runtime: Any) -> None:
        self.events.append(("new", block.hash, block.parent, new_runtime))

    def best_changed(self, block_hash: str) -> None:
        self.events.append(("best", block_hash))

    def finalized(self, hashes: list[str], pruned: list[str]) -> None:
        self.events.append(("fin", tuple(hashes), tuple(sorted(pruned))))

    def stop(self, reason: str) -> None:
        self.events.append(("stop", reason))


def forked(blocks: int) -> tuple[Chain, list[str], list[str]]:
    """A chain finalized at #100 and two forks of ``blocks`` blocks from it."""
    chain = Chain()
    root = chain.grow(ZERO, 100, 1)[0]
    chain.finalized = root
    return chain, chain.grow(root, 101, blocks), chain.grow(root, 101, blocks, salt="f")


async def started(chain: Chain) -> tuple[NetworkView, Hub, Listener]:
    hub = Hub()
    view = NetworkView("finney", hub, lambda: chain)  # type: ignore[arg-type]
    view.start()
    await asyncio.wait_for(view.ready.wait(), 2)
    listener = Listener()
    view.listeners.add(listener)
    return view, hub, listener


async def settle(view: NetworkView) -> None:
    for _ in range(50):
        await asyncio.sleep(0)
        if view._queue.empty():
            await asyncio.sleep(0.01)
            if view._queue.empty():
                return


async def test_missing_ancestors_come_first_with_their_runtimes() -> None:
    chain = Chain()
    base = chain.grow(ZERO, 100, 1)
    chain.finalized = base[0]
    blocks = chain.grow(base[0], 101, 4)
    chain.spec.update({blocks[2]: 2, blocks[3]: 2})  # an upgrade at #103
    view, hub, listener = await started(chain)
    hub.push("new_heads", chain.headers[blocks[3]])  # #104: three ancestors unknown
    await settle(view)
    news = [e for e in listener.events if e[0] == "new"]
    assert [e[1] for e in news] == blocks
    assert news[0][2] == base[0]
    assert [e[3] is not None for e in news] == [False, False, True, False]
    assert news[2][3]["spec"]["specVersion"] == 2
    assert listener.events[-1] == ("best", blocks[3])
    await view.close()


async def test_a_pruned_best_block_is_replaced_before_the_finalized_event() -> None:
    chain, main, fork = forked(2)
    view, hub, listener = await started(chain)
    hub.push("new_heads", chain.headers[main[1]])
    hub.push("new_heads", chain.headers[fork[1]])  # a reorg to the fork
    await settle(view)
    assert listener.events[-1] == ("best", fork[1])
    hub.push("finalized_heads", chain.headers[main[1]])  # finality picks the main chain
    await settle(view)
    assert listener.events[-2:] == [
        ("best", main[1]),
        ("fin", (main[0], main[1]), tuple(sorted(fork))),
    ]
    await view.close()


async def test_a_gap_too_deep_stops_the_follows_and_rebuilds() -> None:
    chain = Chain()
    root = chain.grow(ZERO, 100, 1)[0]
    chain.finalized = root
    far = chain.grow(root, 101, 300)
    view, hub, listener = await started(chain)
    hub.push("new_heads", chain.headers[far[-1]])
    await settle(view)
    assert listener.events and listener.events[-1][0] == "stop"
    assert "gap" in listener.events[-1][1]
    chain.finalized = far[-1]
    await asyncio.wait_for(view.ready.wait(), 5)  # rebuilt at the new finalized block
    assert view.tree is not None and view.tree.finalized == far[-1]
    assert view.rebuilds == 1
    await view.close()


async def test_a_block_the_next_node_has_not_imported_yet_is_asked_again() -> None:
    chain = Chain()
    root = chain.grow(ZERO, 100, 1)[0]
    chain.finalized = root
    new = chain.grow(root, 101, 1)
    view, hub, listener = await started(chain)
    chain.not_yet = 2  # two nodes in turn do not know it yet
    hub.push("new_heads", chain.headers[new[0]])
    for _ in range(500):  # the retries wait 0.25 s, then 0.5 s
        if ("best", new[0]) in listener.events:
            break
        await asyncio.sleep(0.01)
    assert ("best", new[0]) in listener.events
    assert not any(e[0] == "stop" for e in listener.events)
    assert view.rebuilds == 0
    await view.close()


async def test_best_heads_on_a_fork_below_finality_move_the_subscription() -> None:
    """The node feeding best heads follows a minority fork: once finality
    passed the fork point, its heads are ignored (the follows' best stays put)
    and, two in a row, the new-heads subscription is moved off it. A lone late
    head of a lost fork is not enough; a head on our chain in between resets
    the count."""
    chain, main, fork = forked(4)
    view, hub, listener = await started(chain)
    hub.push("new_heads", chain.headers[main[1]])
    hub.push("finalized_heads", chain.headers[main[1]])  # finality passes the fork point
    hub.push("new_heads", chain.headers[fork[2]])  # #103 on the fork: ignored, one strike
    hub.push("new_heads", chain.headers[main[2]])  # our chain again: the count starts over
    hub.push("new_heads", chain.headers[fork[3]])
    await settle(view)
    assert hub.distrusted == []
    assert listener.events[-1] == ("best", main[2])
    hub.push("new_heads", chain.headers[fork[2]])  # a second one in a row: moved
    await settle(view)
    assert hub.distrusted == ["its best heads are on a fork below finality"]
    assert not any(e[0] == "new" and e[1] in fork for e in listener.events)
    assert view.tree is not None and view.tree.best == main[2]
    await view.close()
