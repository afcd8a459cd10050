"""The best block each network has shown through this proxy, with its hash,
for head pinning (pure; time is passed in).

Learned from every header that passes: answers to ``chain_getHeader`` /
``chain_getBlock`` (any upstream, pinned or not) and the new-head
notifications of shared subscriptions. The highest number wins, so the head
used for pinning is never older than a head the proxy has already shown a
client. It is used only while fresh: seen within ``max_age_s`` and not behind
the probes' tip (the sidecar saw a higher block whose hash we do not know).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from addon.blocks import parse_height
from addon.header_hash import header_hash


@dataclass(frozen=True, slots=True)
class Head:
    number: int
    hash: str
    seen: float  # clock() when last confirmed


class HeadBook:
    def __init__(self) -> None:
        self._best: dict[str, Head] = {}

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
        if best is not None and number < best.number:
            return False
        h = block_hash or header_hash(header)
        if h is None:
            return False
        h = h.lower()
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
        if probe_tip is not None and probe_tip > head.number:
            return None  # a newer block exists whose hash this proxy has not seen
        return head
