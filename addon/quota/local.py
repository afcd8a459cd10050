"""Per-client rate limit: a sliding window of per-bucket counters.

"100 requests per 60 s" means what an operator expects: the 101st call within
any 60 s is refused (a token bucket would hand back a token every 0.6 s and
let a steady client exceed 100 per minute). Each client keeps a ring of
counters, one per ``window/60`` seconds (1 s for a 60 s window), so
memory per client is small and fixed. State is bounded: at most
``max_clients`` entries, least recently seen evicted first; a client whose
window is empty is indistinguishable from a new one, so forgetting it loses
nothing.
"""

from __future__ import annotations

import functools
import ipaddress
import math
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    limit: int
    remaining: int
    reset_s: float  # until every counted call has left the window
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
            h.append(("Retry-After", str(self.retry_after)))
        return h

    @property
    def retry_after(self) -> int:
        """Whole seconds, at least 1: what Retry-After and ``data.retry_after`` say."""
        return max(1, math.ceil(self.retry_after_s))


class _Window:
    __slots__ = ("counts", "last")

    def __init__(self, buckets: int, now_idx: int) -> None:
        self.counts = array("I", bytes(4 * buckets))
        self.last = now_idx  # bucket index of the newest count


class RateLimiter:
    def __init__(
        self,
        requests: int,
        window_s: float,
        *,
        max_clients: int = 100_000,
        buckets: int = 60,
        clock: Callable[[], float],
    ) -> None:
        self.limit = requests
        self.window = window_s
        self.buckets = max(1, buckets)
        self.bucket_s = window_s / self.buckets
        self.max_clients = max_clients
        self.policy = f"{requests};w={window_s:g}"
        self._clock = clock
        self._clients: OrderedDict[str, _Window] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._clients)

    def _advance(self, w: _Window, idx: int) -> None:
        """Zero the buckets that slid out of the window since ``w.last``."""
        gap = idx - w.last
        if gap >= self.buckets:
            for i in range(self.buckets):
                w.counts[i] = 0
        else:
            for i in range(w.last + 1, idx + 1):
                w.counts[i % self.buckets] = 0
        w.last = max(w.last, idx)

    def check(self, client: str, cost: int = 1, *, take: bool = True) -> Decision:
        """Take ``cost`` calls from ``client``'s quota, all or nothing; with
        ``take=False`` only say whether they would fit (a WebSocket handshake)."""
        now = self._clock()
        idx = math.floor(now / self.bucket_s)
        w = self._clients.get(client)
        if w is None:
            w = _Window(self.buckets, idx)
        else:
            self._advance(w, idx)
        used = sum(w.counts)
        allowed = used + cost <= self.limit
        if allowed and take:
            w.counts[idx % self.buckets] += cost
            used += cost
            self._clients[client] = w
            self._clients.move_to_end(client)
            self._evict(idx)
        return Decision(
            allowed,
            self.limit,
            max(0, self.limit - used),
            self._reset_after(w, idx, now) if used else 0.0,
            0.0 if allowed else self._retry_after(w, idx, now, used + cost - self.limit),
            self.policy,
        )

    def charge(self, client: str, units: int) -> None:
        """Take ``units`` more from ``client``'s quota whatever is left: a cost
        known only once the call was answered (its bytes). The client's next
        calls are refused until the window has room again."""
        if units <= 0:
            return
        idx = math.floor(self._clock() / self.bucket_s)
        w = self._clients.get(client)
        if w is None:
            w = _Window(self.buckets, idx)
        else:
            self._advance(w, idx)
        # at most the whole quota: a debt never outlasts one window
        w.counts[idx % self.buckets] += min(units, self.limit)
        self._clients[client] = w
        self._clients.move_to_end(client)
        self._evict(idx)

    def refund(self, client: str, units: int) -> None:
        """Give back ``units`` taken moments ago for a call refused later in its
        run (its heavy read did not fit): from the newest buckets back."""
        w = self._clients.get(client)
        if w is None or units <= 0:
            return
        self._advance(w, math.floor(self._clock() / self.bucket_s))
        for back in range(self.buckets):
            b = (w.last - back) % self.buckets
            given = min(units, w.counts[b])
            w.counts[b] -= given
            units -= given
            if not units:
                return

    def _bucket_expiry(self, bucket_idx: int, now: float) -> float:
        """Seconds until calls counted in ``bucket_idx`` leave the window."""
        return max(0.0, (bucket_idx + self.buckets) * self.bucket_s - now)

    def _retry_after(self, w: _Window, idx: int, now: float, excess: int) -> float:
        freed = 0
        for b in range(idx - self.buckets + 1, idx + 1):  # oldest first
            freed += w.counts[b % self.buckets]
            if freed >= excess:
                return self._bucket_expiry(b, now)
        return self.window  # cost larger than the whole quota: never fits

    def _reset_after(self, w: _Window, idx: int, now: float) -> float:
        for b in range(idx, idx - self.buckets, -1):  # newest first
            if w.counts[b % self.buckets]:
                return self._bucket_expiry(b, now)
        return 0.0

    def _evict(self, idx: int) -> None:
        # Clients at the cold end whose window has emptied cost nothing to forget;
        # past the bound the least recently seen goes even if it is not empty.
        while self._clients:
            client, w = next(iter(self._clients.items()))
            if idx - w.last >= self.buckets or len(self._clients) > self.max_clients:
                del self._clients[client]
                self.evicted += 1
            else:
                break


def client_identity(
    peer_ip: str,
    forwarded_for: str | None,
    trusted: Sequence[IPNetwork],
    *,
    ipv6_prefix: int = 128,
) -> str:
    """The address to rate-limit: the peer, unless the peer is a trusted proxy,
    in which case the right-most X-Forwarded-For hop that is not itself trusted.
    IPv6 clients count per ``/ipv6_prefix`` network (128: per address; 64: one
    quota per subnet, since a host usually owns a whole /64)."""
    if not forwarded_for or not _is_trusted(peer_ip, trusted):
        return _canonical(peer_ip, ipv6_prefix)
    hops = [_host_of(h.strip()) for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _is_trusted(hop, trusted):
            return _canonical(hop, ipv6_prefix)
    return _canonical(hops[0] if hops else peer_ip, ipv6_prefix)


def _host_of(hop: str) -> str:
    """A hop's address as balancers write it: ``ip``, ``ip:port`` (Azure's,
    some CDNs'), ``[ipv6]`` or ``[ipv6]:port``; so one client is one quota
    whatever port it came from."""
    if hop.startswith("["):
        end = hop.find("]")
        return hop[1:end] if end > 0 else hop
    if hop.count(":") == 1:
        return hop.partition(":")[0]
    return hop


def _is_trusted(addr: str, trusted: Sequence[IPNetwork]) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return any(ip in net for net in trusted)


@functools.lru_cache(maxsize=8192)  # pure; parsing an address costs ~5 µs a request
def _canonical(addr: str, ipv6_prefix: int = 128) -> str:
    """One spelling per address (IPv4-mapped IPv6 becomes IPv4); junk stays as is
    but bounded in length, so it cannot blow up memory."""
    try:
        ip = ipaddress.ip_address(addr.strip())
    except ValueError:
        return addr[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped:
            return str(ip.ipv4_mapped)
        if ipv6_prefix < 128:
            return str(ipaddress.IPv6Network((ip, ipv6_prefix), strict=False))
    return str(ip)
