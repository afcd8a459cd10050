"""Pure, deterministic model of a Substrate chain whose head advances with a clock.

No I/O here: the clock is injected so tests can drive time, and every value is a
function of (seed, block number) so that separate processes configured alike agree
on heights and hashes, i.e. behave as replicas of one chain.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from addon.chain.header_hash import header_hash

from .runtime import BASE_SPEC, MAX_SPEC, Schedule, metadata
from .runtime import HEAVY_CALL_BYTES as HEAVY_CALL_BYTES
from .runtime import call_result as call_result

FINNEY_GENESIS = "0x2f0555cc76fc2840a25a6ea3b9637146806f1f44b090c175ffde2a7e5ab36c03"
ZERO_HASH = "0x" + "0" * 64
# Default pruning of a substrate full node: state of the last 256 blocks is kept.
PRUNING_DEPTH = 256
# GRANDPA on the simulated chain finalizes two blocks behind the best block.
FINALITY_LAG = 2

HASH_RE = re.compile(r"0x[0-9a-fA-F]{64}")

# Hashes cannot be inverted, so number lookup relies on an index. The most recent
# blocks are indexed eagerly (so hashes learnt from a replica resolve); any other
# block is indexed when this node hands out its hash. The cap bounds memory when a
# benchmark walks millions of block numbers.
INDEX_WINDOW = 16_384
INDEX_MAX = 1 << 18


@dataclass(frozen=True, slots=True)
class ChainConfig:
    """Everything that identifies a chain; equal configs describe replicas."""

    seed: str = "finney"
    genesis: str = FINNEY_GENESIS
    block_time: float = 12.0
    epoch: float = 0.0
    start_height: int = 0
    archive: bool = False
    chain_name: str = "Bittensor"

    def __post_init__(self) -> None:
        if not self.block_time > 0:
            raise ValueError("block_time must be > 0")
        if self.start_height < 0:
            raise ValueError("start_height must be >= 0")
        if not is_hash(self.genesis):
            raise ValueError(f"genesis must be a 0x-prefixed 32-byte hex hash: {self.genesis!r}")


def is_hash(value: object) -> bool:
    return isinstance(value, str) and HASH_RE.fullmatch(value) is not None


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


LINKED_DEPTH = 1024  # blocks below the start height with real, linked header hashes
LINKED_MAX = 5_000_000  # beyond this many blocks above that, a seeded stand-in


@lru_cache(maxsize=65_536)
def seeded_hash(seed: str, n: int) -> str:
    """Hash of block n >= 1 on the chain identified by seed."""
    return "0x" + _sha(f"{seed}:{n}")


@lru_cache(maxsize=16_384)
def _derived(root: str, n: int, what: str) -> str:
    return "0x" + _sha(f"{root}:{n}:{what}")


METADATA = metadata(BASE_SPEC)  # the base runtime's, as before upgrades existed


def storage_value(key: str, wrong: bool = False) -> str | None:
    """Deterministic storage value; keys starting with 0x00 model absent keys.
    ``wrong``: a quarter of the keys (by their hash) get another value."""
    key = key.lower()
    if key.startswith("0x00"):
        return None
    value = _sha(key)
    if wrong and value[0] in "0123":
        return "0x" + _sha("wrong:" + key)
    return "0x" + value


def extrinsic_hash(xt: str) -> str:
    return "0x" + _sha(xt.lower())


class Chain:
    """A chain whose best block is derived from the clock, plus chain-level faults.

    Faults modelled here (because they change what the chain reports): ``lag``
    (best is reported N blocks behind), ``frozen`` (the head stops advancing), a
    genesis override (the node claims to be on another chain) and a runtime
    upgrade (blocks from a height on run another spec version, ``simnode.runtime``).
    """

    def __init__(self, config: ChainConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._clock = clock
        self._seed = config.seed
        self._genesis = config.genesis.lower()
        self._genesis_override: str | None = None
        self._lag = 0
        self.finality_lag = FINALITY_LAG  # the finality_lag fault
        self._frozen_at: int | None = None
        self.wrong_storage = False  # the wrong_storage fault (see storage_value)
        self._fork_at: int | None = None
        self._index: dict[str, int] = {}
        self._indexed_hi = 0
        self._linked_from = max(1, config.start_height - LINKED_DEPTH)
        self._linked: list[str] = []
        self._schedule = Schedule()
        # blocks of state kept below the best one (None: every block's, an archive)
        self._state_keep: int | None = None if config.archive else PRUNING_DEPTH

    # ---- chain-level faults -------------------------------------------------

    @property
    def lag(self) -> int:
        return self._lag

    def set_lag(self, blocks: int) -> None:
        if blocks < 0:
            raise ValueError("lag must be >= 0")
        self._lag = blocks

    @property
    def frozen(self) -> bool:
        return self._frozen_at is not None

    def set_frozen(self, frozen: bool) -> None:
        if frozen and self._frozen_at is None:
            self._frozen_at = self.clock_height()
        elif not frozen:
            self._frozen_at = None

    @property
    def genesis_override(self) -> str | None:
        return self._genesis_override

    def set_genesis_override(self, genesis: str | None) -> None:
        if genesis is not None and not is_hash(genesis):
            raise ValueError(f"genesis must be a 0x-prefixed 32-byte hex hash: {genesis!r}")
        self._genesis_override = genesis.lower() if genesis is not None else None

    @property
    def fork_at(self) -> int | None:
        return self._fork_at

    @property
    def forked(self) -> bool:
        return self._fork_at is not None

    def set_fork(self, fork: bool) -> None:
        """Fork off (or back): the blocks above today's head get other hashes,
        as a node that followed a minority fork reports them. Numbers go on as before;
        turning it off is a reorg back to the main chain."""
        at = self.head() if fork and self._fork_at is None else None
        if (at is None) == (self._fork_at is None):
            return
        above = min(x for x in (at, self._fork_at) if x is not None)
        self._fork_at = at
        # hashes above the fork point change: recompute them, forget the old ones
        del self._linked[max(0, above + 1 - self._linked_from) :]
        self._reset_index()

    @property
    def upgrade(self) -> Schedule:
        return self._schedule

    def set_upgrade(self, at: int | None, spec: int) -> None:
        """Blocks from ``at`` on run spec version ``spec`` (None: no upgrade).
        Set it above the head to watch the head cross it."""
        if at is not None and at < 1:
            raise ValueError("upgrade_at must be a block number >= 1 or null")
        if not BASE_SPEC < spec <= MAX_SPEC:
            raise ValueError(f"upgrade_spec must be in ({BASE_SPEC}, {MAX_SPEC}]")
        self._schedule = Schedule(at, spec)

    def spec_version(self, n: int) -> int:
        """The spec version block ``n`` runs."""
        return self._schedule.spec_at(n)

    @property
    def state_keep(self) -> int | None:
        return self._state_keep

    def set_state_keep(self, keep: int | None) -> None:
        """Keep the state of the last ``keep`` blocks (the best one and the
        ``keep - 1`` below it); None: every block's (an archive)."""
        if keep is not None and keep < 1:
            raise ValueError("state_keep must be an integer >= 1 or null")
        self._state_keep = keep

    def reset_faults(self) -> None:
        self._lag = 0
        self.finality_lag = FINALITY_LAG
        self._frozen_at = None
        self._genesis_override = None
        self._schedule = Schedule()
        self.set_fork(False)

    # ---- heights ------------------------------------------------------------

    def clock_height(self) -> int:
        """Height implied by the clock alone (what every replica agrees on)."""
        cfg = self.config
        elapsed = math.floor((self._clock() - cfg.epoch) / cfg.block_time)
        return cfg.start_height + max(0, elapsed)

    def head(self) -> int:
        """The node's own head: the clock height unless frozen. Ignores lag."""
        return self._frozen_at if self._frozen_at is not None else self.clock_height()

    def best(self) -> int:
        """Best block as reported to clients (lag applied)."""
        return max(0, self.head() - self._lag)

    def finalized(self) -> int:
        return max(0, self.best() - self.finality_lag)

    # ---- hashes -------------------------------------------------------------

    def genesis_hash(self) -> str:
        return self._genesis_override or self._genesis

    def block_hash(self, n: int) -> str:
        """Hash of block n whether or not it is reached yet (n >= 0). From
        ``start_height - LINKED_DEPTH`` on it is the real Substrate hash of the
        block's header (blake2b-256 of its SCALE encoding, parent linked), as a
        node's is, so a proxy can hash a header it saw; deeper history uses a
        seeded stand-in (computing millions of linked hashes would be slow)."""
        if n == 0:
            return self.genesis_hash()
        h = self._linked_hash(n) if n >= self._linked_from else seeded_hash(self._root(n), n)
        # Remember it: a client that got this hash may come back with it.
        index = self._index
        if h not in index:
            if len(index) >= INDEX_MAX:
                self._reset_index()
            index[h] = n
        return h

    def hash_at(self, n: int) -> str | None:
        """Hash of block n, or None if n is above the reported best."""
        if n < 0 or n > self.best():
            return None
        return self.block_hash(n)

    def number_of(self, block_hash: str) -> int | None:
        """Number of the block with this hash, or None if unknown or above best."""
        h = block_hash.lower()
        if h == self.genesis_hash():
            return 0
        n = self._index.get(h)
        if n is None:
            self._extend_index()
            n = self._index.get(h)
        if n is None or n > self.best():
            return None
        return n

    def _reset_index(self) -> None:
        self._index.clear()
        self._indexed_hi = 0

    def _extend_index(self) -> None:
        top = self.head()
        lo = max(1, top - INDEX_WINDOW + 1, self._indexed_hi + 1)
        if lo > top:
            return
        if len(self._index) + (top - lo + 1) > INDEX_MAX:
            self._reset_index()
            lo = max(1, top - INDEX_WINDOW + 1)
        index = self._index
        for n in range(lo, top + 1):
            index[self.block_hash(n)] = n
        self._indexed_hi = top

    # ---- blocks and state ---------------------------------------------------

    def _root(self, n: int) -> str:
        # Block 0 is shared by every fork of a genesis, so derive it from the genesis.
        if n == 0:
            return self._genesis
        if self._fork_at is not None and n > self._fork_at:
            return self._seed + "/fork"
        return self._seed

    def _linked_hash(self, n: int) -> str:
        linked = self._linked  # hashes of _linked_from, _linked_from + 1, ...
        if n - self._linked_from > LINKED_MAX:
            return seeded_hash(self._root(n), n)  # absurdly far in the future
        while len(linked) <= n - self._linked_from:
            k = self._linked_from + len(linked)
            parent = linked[-1] if linked else self.block_hash(k - 1)
            h = header_hash(self._header(k, parent))
            assert h is not None
            linked.append(h)
        return linked[n - self._linked_from]

    def header(self, n: int) -> dict[str, Any]:
        return self._header(n, self.block_hash(n - 1) if n > 0 else ZERO_HASH)

    def _header(self, n: int, parent: str) -> dict[str, Any]:
        root = self._root(n)
        return {
            "parentHash": parent,
            "number": hex(n),
            "stateRoot": _derived(root, n, "state"),
            "extrinsicsRoot": _derived(root, n, "extrinsics"),
            "digest": {"logs": []},
        }

    def block(self, n: int) -> dict[str, Any]:
        root = self._root(n)
        extrinsics = [
            _derived(root, n, "xt0")[:42],  # stands in for timestamp.set
            _derived(root, n, "xt1"),
        ]
        return {
            "block": {"header": self.header(n), "extrinsics": extrinsics},
            "justifications": None,
        }

    def state_available(self, n: int) -> bool:
        """Whether state at block n (<= best) is still kept (pruning): the last
        ``state_keep`` blocks' (``--state-keep``, the ``state_keep`` fault)."""
        keep = self._state_keep
        return keep is None or self.best() - n < keep
