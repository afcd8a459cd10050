"""Per-client rate limit: GCRA (a leaky bucket kept as one timestamp per client).

``requests`` per ``window_s`` with a burst of the whole quota, as a sliding
window would give, but in O(1) memory per client. State is bounded: at most
``max_clients`` entries, least recently seen evicted first; a client whose
bucket has drained is indistinguishable from a new one, so evicting it loses
nothing.
"""

from __future__ import annotations

import ipaddress
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    limit: int
    remaining: int
    reset_s: float  # until the bucket is full again
    retry_after_s: float  # 0 when allowed
    policy: str

    def headers(self) -> list[tuple[str, str]]:
        h = [
            ("X-RateLimit-Limit", str(self.limit)),
            ("X-RateLimit-Remaining", str(self.remaining)),
            ("X-RateLimit-Reset", str(math.ceil(self.reset_s))),
            ("X-RateLimit-Policy", self.policy),
        ]
        if not self.allowed:
            h.append(("Retry-After", str(max(1, math.ceil(self.retry_after_s)))))
        return h


class RateLimiter:
    def __init__(
        self,
        requests: int,
        window_s: float,
        *,
        max_clients: int = 100_000,
        clock: Callable[[], float],
    ) -> None:
        self.limit = requests
        self.window = window_s
        self.interval = window_s / requests  # one request "drains" in this long
        self.max_clients = max_clients
        self.policy = f"{requests};w={window_s:g}"
        self._clock = clock
        self._tat: OrderedDict[str, float] = OrderedDict()  # theoretical arrival time
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._tat)

    def _remaining(self, tat: float, now: float) -> int:
        return max(
            0, min(self.limit, math.floor((self.window - (tat - now)) / self.interval + 1e-9))
        )

    def check(self, client: str, cost: int = 1) -> Decision:
        """Take ``cost`` requests from ``client``'s quota, all or nothing."""
        now = self._clock()
        tat = max(self._tat.get(client, now), now)
        new_tat = tat + cost * self.interval
        if new_tat - now > self.window + 1e-9:
            retry = new_tat - self.window - now
            return Decision(
                False, self.limit, self._remaining(tat, now), tat - now, retry, self.policy
            )
        self._tat[client] = new_tat
        self._tat.move_to_end(client)
        self._evict(now)
        return Decision(
            True, self.limit, self._remaining(new_tat, now), new_tat - now, 0.0, self.policy
        )

    def _evict(self, now: float) -> None:
        # Drained buckets at the cold end cost nothing to forget; past the bound,
        # the least recently seen client goes even if it is not drained.
        while self._tat:
            client, tat = next(iter(self._tat.items()))
            if tat <= now or len(self._tat) > self.max_clients:
                del self._tat[client]
                self.evicted += 1
            else:
                break


def client_identity(peer_ip: str, forwarded_for: str | None, trusted: Sequence[IPNetwork]) -> str:
    """The address to rate-limit: the peer, unless the peer is a trusted proxy,
    in which case the right-most X-Forwarded-For hop that is not itself trusted."""
    if not forwarded_for or not _is_trusted(peer_ip, trusted):
        return _canonical(peer_ip)
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _is_trusted(hop, trusted):
            return _canonical(hop)
    return _canonical(hops[0]) if hops else _canonical(peer_ip)


def _is_trusted(addr: str, trusted: Sequence[IPNetwork]) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return any(ip in net for net in trusted)


def _canonical(addr: str) -> str:
    """One spelling per address (IPv4-mapped IPv6 becomes IPv4); junk stays as is
    but bounded in length, so it cannot blow up memory."""
    try:
        ip = ipaddress.ip_address(addr.strip())
    except ValueError:
        return addr[:64]
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        return str(ip.ipv4_mapped)
    return str(ip)
