"""Which reads clients make at every block, for pre-warming (pure; no I/O).

A fleet of validators and apps makes the same heavy reads at each new block
(``SubnetInfoRuntimeApi_get_all_dynamic_info``, ``get_all_metagraphs``,
``NeuronInfoRuntimeApi_get_neurons_lite``, storage and key pages), sent
without a block hash and pinned by the proxy to the head. Each such read is
noted here with the block it was pinned to and the client who asked (cache
hits included: a read the cache answered is still a read asked for).

``candidates`` picks, for a new block, the reads at least ``min_clients``
distinct clients asked at each of the ``blocks`` blocks before it, the most
wanted first (clients times the bytes they answer), at most ``max_reads``: those
are fetched ahead (``addon/hooks/prewarm.py``), and stop being fetched as
soon as clients stop asking. ``warmed``/``touch``/``rotate`` count what the
pre-warm was worth: fetched, used by a client, or wasted (no client came).
Everything is bounded: shapes per network, blocks kept per shape, clients
kept per block (``min_clients`` of them are all the rule needs).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from addon.rpc.jsonrpc import Call, dumps

MAX_SHAPES = 4096  # reads tracked per network (least recently asked dropped first)
# Metadata is cached per runtime, not per block (``addon/cache/per_runtime.py``),
# found through the block's runtime version: fetched ahead beside the version,
# before that is cached, it would be a full download at every block.
NOT_PREWARMED = frozenset({"state_getMetadata"})


@dataclass(slots=True)
class _Shape:
    call: Call  # as the client sent it (no hash)
    weight: float  # how dear one fetch is: 1 + its expected answer in 64 KiB blocks
    asks: dict[int, set[str]] = field(default_factory=dict)  # block -> clients (bounded)


class Demand:
    def __init__(self, *, max_reads: int, min_clients: int = 2, blocks: int = 2) -> None:
        self.max_reads = max_reads
        self.min_clients = max(1, min_clients)
        self.blocks = max(1, blocks)
        self._shapes: dict[str, OrderedDict[bytes, _Shape]] = {}
        self._warmed: dict[str, dict[str, bool]] = {}  # network -> cache key -> used

    @property
    def enabled(self) -> bool:
        return self.max_reads > 0

    def note(self, network: str, call: Call, block: int, client: str, expected: int = 0) -> None:
        """``client`` asked ``call`` (hash-less) and it was pinned to ``block``."""
        if not self.enabled or call.method in NOT_PREWARMED:
            return
        shapes = self._shapes.setdefault(network, OrderedDict())
        key = dumps([call.method, call.params])
        shape = shapes.get(key)
        if shape is None:
            shape = shapes[key] = _Shape(call, 1.0 + expected / 65_536)
            while len(shapes) > MAX_SHAPES:
                shapes.popitem(last=False)
        else:
            shapes.move_to_end(key)
            shape.weight = 1.0 + expected / 65_536
        clients = shape.asks.get(block)
        if clients is None:
            clients = shape.asks[block] = set()
            for old in [b for b in shape.asks if b < block - self.blocks]:
                del shape.asks[old]
        if len(clients) < self.min_clients:
            clients.add(client)

    def candidates(self, network: str, block: int) -> list[Call]:
        """The reads to fetch ahead for ``block``, the most wanted first."""
        shapes = self._shapes.get(network)
        if not self.enabled or not shapes:
            return []
        wanted = range(block - self.blocks, block)
        ranked: list[tuple[float, Call]] = []
        stale: list[bytes] = []
        for key, shape in shapes.items():
            if all(b < block - self.blocks for b in shape.asks):
                stale.append(key)  # nobody asked lately: demand stopped
                continue
            counts = [len(shape.asks.get(b, ())) for b in wanted]
            if min(counts) >= self.min_clients:
                ranked.append((sum(counts) * shape.weight, shape.call))
        for key in stale:
            del shapes[key]
        ranked.sort(key=lambda x: -x[0])
        return [call for _, call in ranked[: self.max_reads]]

    # --- what it was worth ---------------------------------------------------------------

    def rotate(self, network: str) -> int:
        """A new block: the last block's pre-warmed entries no client used (wasted)."""
        warmed = self._warmed.pop(network, {})
        return sum(1 for used in warmed.values() if not used)

    def warmed(self, network: str, keys: tuple[str, ...]) -> None:
        self._warmed.setdefault(network, {}).update(dict.fromkeys(keys, False))

    def touch(self, network: str, keys: tuple[str, ...]) -> int:
        """A client's read was answered from these entries: how many were
        pre-warmed and used for the first time."""
        warmed = self._warmed.get(network)
        if not warmed:
            return 0
        first = 0
        for k in keys:
            if warmed.get(k) is False:
                warmed[k] = True
                first += 1
        return first
