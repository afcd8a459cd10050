"""What this proxy process knows of each network's chain, in one place; it
outlives config reloads (``Runtime.reload`` hands it on whole).

* ``tips`` / ``finalized``: the heights the sidecar's probes report (the
  routing snapshot): how far the healthy nodes are, for routing and caching.
* ``blocks``: heights of block hashes learned from answers (archive routing).
* ``best``: the best head *shown through this proxy*, with its hash, learned
  from headers that pass (head pinning, ``head_book.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from addon.chain.head_book import HeadBook
from addon.rpc.blocks import BlockIndex


@dataclass(slots=True)
class ChainState:
    tips: dict[str, int] = field(default_factory=dict)
    finalized: dict[str, int] = field(default_factory=dict)
    blocks: BlockIndex = field(default_factory=BlockIndex)
    best: HeadBook = field(default_factory=HeadBook)
    # when each network's heights last came (a sidecar down keeps its last ones)
    heights_at: dict[str, float] = field(default_factory=dict)
    # how many routing snapshots each network has had applied (``/rpc/healthz``)
    snapshots: dict[str, int] = field(default_factory=dict)

    def heights(self, network: str) -> tuple[int | None, int | None]:
        """(tip, finalized) from the probes; None where unknown."""
        return self.tips.get(network), self.finalized.get(network)

    def set_heights(
        self, network: str, tip: int | None, finalized: int | None, at: float | None = None
    ) -> None:
        """Heights from the latest snapshot (None: unknown, forget the old),
        taken at ``at`` (a routing snapshot applied: counted)."""
        for store, value in ((self.tips, tip), (self.finalized, finalized)):
            if value is None:
                store.pop(network, None)
            else:
                store[network] = value
        if at is not None:
            self.heights_at[network] = at
            self.snapshots[network] = self.snapshots.get(network, 0) + 1

    def current_tip(self, network: str, now: float, max_age_s: float) -> int | None:
        """The probes' tip, if it came within ``max_age_s`` (or its time is
        unknown); None when it is older: a sidecar that stopped reporting."""
        at = self.heights_at.get(network)
        if at is not None and now - at > max_age_s:
            return None
        return self.tips.get(network)
