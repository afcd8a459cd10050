"""The best block each network has shown through this proxy, with its hash,
for head pinning (pure; time is passed in).

Learned from every header that passes: answers to ``chain_getHeader`` /
``chain_getBlock`` (any upstream, pinned or not) and the new-head
notifications of shared subscriptions. The highest number wins, so the head
used for pinning is never older than a head the proxy has already shown a
client. It is used only while fresh: seen within ``max_age_s`` and not behind
the probes' tip (the sidecar saw a higher block whose hash we do not know).
A head the probes' tip stays below for ``ABANDONED_AFTER_S`` with no newer
header is forgotten: the chain moved back to a shorter fork (the next
header is the head, whatever its height).

A best-block *hash* can also be shown without its header (``chain_getHead``,
``chain_getBlockHash``, which async-substrate-interface and bittensor use to
take the head). If it is not the head's hash nor a known older block, a newer
block than the head may exist: pinning pauses until that hash's header, or a
child's, passes (the SDK asks for it next; from the cache too, which another
proxy process may have filled; a child: the chain moved back to that block and
built on it) or ``max_age_s`` has passed since it was first shown (by then the
probes see any newer block). Otherwise a read sent right after would get state older than
the head the client was just shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from addon.chain.header_hash import header_hash
from addon.rpc.blocks import parse_height

# the probes' tip below a head not replaced for this long: the head was abandoned
ABANDONED_AFTER_S = 6.0


@dataclass(frozen=True, slots=True)
class Head:
    number: int
    hash: str
    seen: float  # clock() when last confirmed


# answers that are a block hash without its header (chain_getHead: an alias)
HASH_METHODS = ("chain_getHead", "chain_getBlockHash")


@dataclass(frozen=True, slots=True)
class _Shown:
    """A block hash shown without its header, that may be newer than the head."""

    hash: str
    height: int | None  # when the block index knows it
    at: float

    def explained_by(self, number: int, block_hash: str | None, parent: str | None) -> bool:
        """Whether a header (its number, its hash, its parent's) says the head is
        not behind it: the block itself, a child of it, or one at its height or above."""
        return (
            block_hash == self.hash
            or parent == self.hash
            or (self.height is not None and number >= self.height)
        )


class HeadBook:
    def __init__(self) -> None:
        self._best: dict[str, Head] = {}  # (the highest; see ``fresh`` for a chain that moved back)
        self._unseen: dict[str, _Shown] = {}
        # a head a node did not know when a read was pinned to it (reorged away,
        # or announced by a node the others have not caught up with): not pinned
        # to again; a head with another hash ends it
        self._distrusted: dict[str, str] = {}

    def get(self, network: str) -> Head | None:
        return self._best.get(network)

    def learn(self, network: str, header: Any, now: float, block_hash: str | None = None) -> bool:
        """Consider one header (JSON as nodes answer it); True when it is the new best."""
        if not isinstance(header, dict):
            return False
        number = parse_height(header.get("number"))
        if number is None:
            return False
        best = self._best.get(network)
        unseen = self._unseen.get(network)
        parent = header.get("parentHash")
        parent = parent.lower() if isinstance(parent, str) else None
        if best is not None and number < best.number:
            if unseen is not None and unseen.explained_by(
                number, _hash_of(header, block_hash), parent
            ):
                del self._unseen[network]  # the hash shown was an older block: the head stands
            return False
        h = _hash_of(header, block_hash)
        if h is None:
            return False
        if unseen is not None and unseen.explained_by(number, h, parent):
            del self._unseen[network]
        # higher, or a re-org at the same height; the same head seen again stays fresh
        new = best is None or number > best.number or h != best.hash
        self._best[network] = Head(number, h, now)
        return new

    def fresh(
        self, network: str, now: float, *, max_age_s: float, probe_tip: int | None
    ) -> Head | None:
        """The head to pin to, or None (then calls go unpinned, as without pinning)."""
        head = self._best.get(network)
        if head is None or now - head.seen > max_age_s:
            return None
        if self._distrusted.get(network) == head.hash:
            return None
        unseen = self._unseen.get(network)
        if unseen is not None:
            if now - unseen.at <= max_age_s:
                return None  # a hash was shown that may be newer than the head
            del self._unseen[network]  # its header never came: the probes' tip decides
        if probe_tip is not None and probe_tip > head.number:
            return None  # a newer block exists whose hash this proxy has not seen
        if (
            probe_tip is not None
            and probe_tip < head.number
            and now - head.seen > ABANDONED_AFTER_S
        ):
            # The nodes' best stayed below the head while no header replaced
            # it (probes lag a new head by a probe, not seconds): the chain
            # moved back to a shorter fork and the head is abandoned.
            # Forgotten, so the next header is the head whatever its height
            # (highest-wins kept the abandoned one, and answered from it,
            # until it aged out).
            del self._best[network]
            self._unseen.pop(network, None)
            return None
        return head

    def distrust(self, network: str, block_hash: str) -> None:
        """A node answered "unknown block" for ``block_hash`` when a read was
        pinned to it: stop pinning to it (until a head with another hash)."""
        self._distrusted[network] = block_hash.lower()

    def distrusted(self, network: str) -> str | None:
        return self._distrusted.get(network)

    def unseen(self, network: str) -> bool:
        """Whether pinning waits for the header of a hash shown (see ``shown``)."""
        return network in self._unseen

    def shown(self, network: str, block_hash: str, now: float, height: int | None) -> None:
        """A block hash was answered without its header (``HASH_METHODS``); its
        height when known (the block index). The head's own hash, or an older
        block, changes nothing."""
        h = block_hash.lower()
        best = self._best.get(network)
        if best is not None and (h == best.hash or (height is not None and height <= best.number)):
            return
        shown = self._unseen.get(network)
        if shown is not None and shown.hash == h:
            return  # shown again: the pause runs from the first time (max_age_s)
        self._unseen[network] = _Shown(h, height, now)


def _hash_of(header: dict[str, Any], block_hash: str | None) -> str | None:
    h = block_hash or header_hash(header)
    return h.lower() if h is not None else None
