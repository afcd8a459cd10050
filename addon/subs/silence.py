"""Upstream subscription sockets that go silent, and the nodes behind them (pure).

A node's socket can stay open, answer calls and pings, and push nothing: its
head subscription stalls while the network goes on. Nothing on the socket
says so; what does is the network advancing past what the socket delivered.

* **Evidence** (``evidence``): the probes' tip and finalized height, and the
  heads every shared head subscription of the network delivered (a best head
  N says the network's best is at least N; a finalized head N says both its
  best and its finalized are at least N). So a socket muted while another
  socket's subscription pushes newer heads is seen even between probes.
* **Judgement** (``judge``): a head subscription (new, finalized or all
  heads) that saw no notification for ``stall_s`` (two block times by
  default) while the evidence is above the last number it delivered is
  silent. The watchdog (``SubscriptionHub``) then moves every subscription of
  that socket (runtime version and storage ones too: they ride the same
  silent socket) as it does when a node dies, and the sequencer fills the gap.
* **Silent nodes** (``SilentNodes``): the node is marked silent (a log line,
  ``chainproxy_upstream_silent_total{endpoint}``, and a ``silent`` incident in
  the sidecar while any proxy reports it), avoided for new subscriptions while
  another node can take them, until it pushes again: one of its head
  subscriptions is left on it as a canary (not unsubscribed, its
  notifications going nowhere but here); its first notification clears the
  mark and the canary is unsubscribed. A canary whose socket closes clears
  the mark too (nothing is left to watch; the probes judge the node).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from addon.subs.upstream import UpstreamSocket

HEAD_KINDS = frozenset({"new_heads", "finalized_heads", "all_heads"})


def evidence(
    tip: int | None, finalized: int | None, delivered: Iterable[tuple[str, int | None]]
) -> tuple[int | None, int | None]:
    """(best, finalized): the highest each is known to be on the network, from
    the probes (``tip``, ``finalized``) and the head subscriptions' delivered
    numbers (``(kind, last number)`` pairs)."""
    best, fin = tip, finalized
    for kind, n in delivered:
        if n is None or kind not in HEAD_KINDS:
            continue
        best = n if best is None else max(best, n)
        if kind == "finalized_heads":
            fin = n if fin is None else max(fin, n)
    return best, fin


def judge(
    kind: str,
    delivered: int | None,
    quiet_s: float,
    stall_s: float,
    best: int | None,
    finalized: int | None,
) -> str:
    """Why a head subscription's socket is silent ("" when it is not): no
    notification for ``quiet_s`` >= ``stall_s`` while the network's height of
    its kind is above the last number it ``delivered``."""
    if kind not in HEAD_KINDS or quiet_s < stall_s or delivered is None:
        return ""
    chain = finalized if kind == "finalized_heads" else best
    if chain is None or chain <= delivered:
        return ""
    return f"silent: no head for {quiet_s:.0f}s while the chain is at {chain}"


@dataclass(frozen=True, slots=True)
class Canary:
    """A head subscription left on a silent node to hear it push again."""

    socket: UpstreamSocket
    sub: str  # the node's subscription id
    unsubscribe: str  # the method that ends it


@dataclass(slots=True)
class SilentNodes:
    """Nodes whose subscription socket went silent, by endpoint id."""

    since: dict[str, float] = field(default_factory=dict)
    canaries: dict[str, Canary] = field(default_factory=dict)

    def watch(self, endpoint: str, canary: Canary, now: float) -> bool:
        """Mark ``endpoint`` silent with its canary; False when it already has one."""
        if endpoint in self.canaries:
            return False
        self.canaries[endpoint] = canary
        self.since.setdefault(endpoint, now)
        return True

    def spoke(self, endpoint: str, socket: UpstreamSocket) -> Canary | None:
        """The canary on ``socket`` heard something (or its socket closed): the
        mark goes; the canary to unsubscribe, or None when it was not this one."""
        canary = self.canaries.get(endpoint)
        if canary is None or canary.socket is not socket:
            return None
        del self.canaries[endpoint]
        self.since.pop(endpoint, None)
        return canary

    def avoid(self) -> set[str]:
        """Endpoints not to subscribe on while another node can take it."""
        return set(self.since)

    def gauge(self) -> dict[str, int]:
        """1 per silent node (the usage batches' ``upstream_silent``)."""
        return dict.fromkeys(self.since, 1)
