"""The proxies' live metrics, accumulated since the sidecar started (no I/O).

Each accepted usage batch with a ``metrics`` section (``common.metrics_wire``)
is folded in by ``UsageService`` after the store took it — a batch id seen
before never reaches this, so nothing counts twice. Counters only grow (the
Prometheus collector in ``sidecar.metrics`` reads them at scrape time);
gauges are the latest snapshot per proxy, summed over the proxies heard from
within ``gauge_ttl_s`` (a node's back-off: the latest end any of them reported).

Bounded whatever the proxies send: at most ``max_series`` label sets per
metric (a row with a new label set beyond that is dropped and counted in
``dropped``, per metric) and ``max_proxies`` live gauge snapshots. Ingest
runs in a worker thread and scrapes on the event loop, hence the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from common.metrics_wire import (
    DURATION_BUCKETS,
    EXTRA_COUNTERS,
    GAUGE_TTL_S,
    MAX_PROXIES,
    MAX_SERIES,
)
from sidecar.metrics.batch_section import Gauges, Labels, ProxyMetrics

K = TypeVar("K", bound=Hashable)

# What the caps can drop from (keys of ``Counters.dropped``); "gauges": a proxy's
# snapshot past ``max_proxies``.
CAPPED = (
    "chainproxy_requests_total",
    "chainproxy_upstream_attempts_total",
    "chainproxy_failovers_total",
    *EXTRA_COUNTERS,
    "gauges",
)


@dataclass(slots=True)
class Histogram:
    buckets: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    sum: float = 0.0

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus' ``le`` buckets: (upper edge, calls at or below it), +Inf last."""
        out, total = [], 0
        for edge, n in zip([*map(str, DURATION_BUCKETS), "+Inf"], self.buckets, strict=True):
            total += n
            out.append((edge, total))
        return out


@dataclass(frozen=True, slots=True)
class GaugeTotals:
    proxies: int  # proxies whose snapshot is live
    ws_connections: int
    spool_batches: int  # the largest per host (a machine's proxies share one spool), summed
    client_subscriptions: dict[str, int]
    upstream_subscriptions: dict[str, int]
    # endpoint id -> value, over the live proxies:
    upstream_sent_last_s: dict[str, int]  # summed: what the node got from all of them
    # the highest: with Redis every proxy paces the node at the deployment's one
    # learned rate (a sum said N times it); without, each its own
    upstream_learned_rps: dict[str, int]
    # the latest end of a back-off (unix time) still ahead of ``at``: a node that
    # pushes back on one proxy gets no traffic from it until then
    upstream_backoff_until: dict[str, float]
    at: float  # when these totals were taken (the sidecar's clock)
    # nodes a live proxy's cross-check quarantined (answer-mismatch): the count of proxies
    upstream_quarantined: dict[str, int] = field(default_factory=dict)
    # nodes whose subscription socket went silent in a live proxy (silent): the
    # count of proxies
    upstream_silent: dict[str, int] = field(default_factory=dict)
    # the latest block a node answered "state discarded" for, over the live proxies
    upstream_state_lost: dict[str, int] = field(default_factory=dict)
    # mechanisms a live proxy runs without (an accepted untested mitmproxy or
    # wsproto): the count of proxies
    mechanisms_off: dict[str, int] = field(default_factory=dict)
    # network -> blocks pinned by chainHead_v1 follows, summed over the live proxies
    follow_pinned_blocks: dict[str, int] = field(default_factory=dict)

    def backoff_left(self) -> dict[str, float]:
        """Seconds left of each node's back-off at ``at`` (all > 0)."""
        return {eid: until - self.at for eid, until in self.upstream_backoff_until.items()}


@dataclass(frozen=True, slots=True)
class _Snapshot:
    sent_at: float
    received: float
    gauges: Gauges


@dataclass(slots=True)
class Counters:
    """A consistent copy of the counters for one scrape."""

    requests: dict[tuple[str, str, str], int] = field(default_factory=dict)
    duration: dict[str, Histogram] = field(default_factory=dict)
    attempts: dict[tuple[str, str], int] = field(default_factory=dict)
    failovers: dict[str, int] = field(default_factory=dict)
    extra: dict[str, dict[Labels, int]] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)  # metric -> rows dropped by the cap


def host_of(proxy_id: str) -> str:
    """``host:pid`` -> ``host`` (an id without ``:`` is its own host)."""
    return proxy_id.rpartition(":")[0] or proxy_id


class ProxyCounters:
    def __init__(
        self,
        clock: Callable[[], float],
        *,
        max_series: int = MAX_SERIES,
        max_proxies: int = MAX_PROXIES,
        gauge_ttl_s: float = GAUGE_TTL_S,
    ) -> None:
        self._clock = clock
        self.max_series = max_series
        self.max_proxies = max_proxies
        self.gauge_ttl_s = gauge_ttl_s
        self._c = Counters()
        self._snapshots: dict[str, _Snapshot] = {}
        self._lock = threading.Lock()

    def _bump(self, table: dict[K, int], key: K, n: int, metric: str) -> None:
        if key in table:
            table[key] += n
        elif len(table) < self.max_series:
            table[key] = n
        else:  # a new label set past the cap: dropped, but never silently
            self._c.dropped[metric] = self._c.dropped.get(metric, 0) + 1

    def add(self, m: ProxyMetrics, sent_at: float) -> None:
        """Fold in the metrics of one newly accepted batch built at ``sent_at``."""
        now = self._clock()
        c = self._c
        with self._lock:
            for net, method, outcome, n in m.requests:
                self._bump(c.requests, (net, method, outcome), n, "chainproxy_requests_total")
            for net, counts, total in m.duration:
                h = c.duration.get(net)
                if h is None:  # networks are checked against the config: few of them
                    h = c.duration[net] = Histogram()
                h.buckets = [a + b for a, b in zip(h.buckets, counts, strict=True)]
                h.sum += total
            for eid, result, n in m.attempts:
                self._bump(c.attempts, (eid, result), n, "chainproxy_upstream_attempts_total")
            for net, n in m.failovers:
                self._bump(c.failovers, net, n, "chainproxy_failovers_total")
            for name, labels, n in m.extra:
                self._bump(c.extra.setdefault(name, {}), labels, n, name)
            if m.gauges is not None:
                self._snapshot(m.proxy_id, sent_at, now, m.gauges)

    def observe_gauges(self, m: ProxyMetrics, sent_at: float) -> None:
        """Take only the gauge snapshot of a batch the store could not take: the
        proxy will send the batch again (its counters are counted then), but its
        spool depth is news now — the spool grows exactly while batches fail."""
        if m.gauges is not None:
            with self._lock:
                self._snapshot(m.proxy_id, sent_at, self._clock(), m.gauges)

    def _snapshot(self, proxy_id: str, sent_at: float, now: float, gauges: Gauges) -> None:
        for pid in [p for p, s in self._snapshots.items() if now - s.received >= self.gauge_ttl_s]:
            del self._snapshots[pid]
        old = self._snapshots.get(proxy_id)
        if old is not None and sent_at < old.sent_at:
            return  # an older batch delivered late from the spool: not the current state
        if old is None and len(self._snapshots) >= self.max_proxies:
            self._c.dropped["gauges"] = self._c.dropped.get("gauges", 0) + 1
            return
        self._snapshots[proxy_id] = _Snapshot(sent_at, now, gauges)

    def counters(self) -> Counters:
        with self._lock:
            c = self._c
            return Counters(
                requests=dict(c.requests),
                duration={k: Histogram(list(h.buckets), h.sum) for k, h in c.duration.items()},
                attempts=dict(c.attempts),
                failovers=dict(c.failovers),
                extra={k: dict(v) for k, v in c.extra.items()},
                dropped=dict(c.dropped),
            )

    def gauges(self) -> GaugeTotals:
        """The sums over the proxies heard from within ``gauge_ttl_s``."""
        now = self._clock()
        with self._lock:
            live = {
                pid: s for pid, s in self._snapshots.items() if now - s.received < self.gauge_ttl_s
            }
        spool: dict[str, int] = {}
        for pid, s in live.items():
            host = host_of(pid)
            spool[host] = max(spool.get(host, 0), s.gauges.spool_batches)
        gauges = [s.gauges for s in live.values()]
        return GaugeTotals(
            proxies=len(live),
            ws_connections=sum(g.ws_connections for g in gauges),
            spool_batches=sum(spool.values()),
            client_subscriptions=self._summed(g.client_subscriptions for g in gauges),
            upstream_subscriptions=self._summed(g.upstream_subscriptions for g in gauges),
            upstream_sent_last_s=self._summed(g.upstream_sent_last_s for g in gauges),
            upstream_learned_rps=self._highest(g.upstream_learned_rps for g in gauges),
            upstream_backoff_until=self._backoff_until(live.values(), now),
            upstream_quarantined=self._summed(g.upstream_quarantined for g in gauges),
            upstream_silent=self._summed(g.upstream_silent for g in gauges),
            upstream_state_lost=self._highest(g.upstream_state_lost for g in gauges),
            mechanisms_off=self._summed(g.mechanisms_off for g in gauges),
            follow_pinned_blocks=self._summed(g.follow_pinned_blocks for g in gauges),
            at=now,
        )

    def _summed(self, snapshots: Iterable[tuple[tuple[str, int], ...]]) -> dict[str, int]:
        """Per key (method or endpoint id), the sum over the snapshots."""
        out: dict[str, int] = {}
        for pairs in snapshots:
            for key, n in pairs:
                if key in out:
                    out[key] += n
                elif len(out) < self.max_series:  # keys past the cap are left out
                    out[key] = n
        return out

    def _highest(self, snapshots: Iterable[tuple[tuple[str, int], ...]]) -> dict[str, int]:
        """Per key, the highest value over the snapshots."""
        out: dict[str, int] = {}
        for pairs in snapshots:
            for key, n in pairs:
                if key in out or len(out) < self.max_series:
                    out[key] = max(out.get(key, n), n)
        return out

    def _backoff_until(self, live: Iterable[_Snapshot], now: float) -> dict[str, float]:
        """Per node, the latest back-off end any live proxy reported, if still ahead:
        the seconds are counted from when the proxy built the batch, so one that
        arrived late (from the spool) has already used up part of them."""
        out: dict[str, float] = {}
        for s in live:
            for eid, seconds in s.gauges.upstream_backoff_s:
                until = s.sent_at + seconds
                if until > now and (eid in out or len(out) < self.max_series):
                    out[eid] = max(out.get(eid, until), until)
        return out
