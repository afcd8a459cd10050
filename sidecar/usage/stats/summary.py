"""The public ``GET /api/v1/usage`` document from the window totals (pure).

Definitions:

* Only the networks of ``proxy.networks`` count (a network removed from the
  config drops out).
* **success** = requests - errors; every ``pct`` is ``count / requests * 100``
  rounded to 2 decimals, 0 when there are no requests.
* **p50_ms / p95_ms**: integer ms read from the merged histograms of the window
  (~1 % relative error), null when there are no requests.
* **endpoints**: one row per upstream endpoint id with requests in the window
  (cache hits have no endpoint and make no row), ordered by requests
  descending then label. ``share_pct`` = its requests / all endpoint requests
  in scope; ``errors_pct`` = its errors / its requests; ``avg_latency_ms`` =
  its latency sum / its requests, rounded.
* **endpoint label**: ``<provider>-<network>-rpc``, or ``<provider>-archive-rpc``
  for an archive endpoint; a ``node-wss`` endpoint's (the subscriptions' and
  the new spec's node) ends ``-wss`` instead, any other kind in its kind.
  Labels are assigned over every endpoint of the config plus any other id
  seen in the window (an id no longer in the config has provider
  ``unknown``), in id order: the first keeps the plain label, the next ones
  get ``-2``, ``-3`` … So a label does not depend on the ``?network=``
  filter or on which endpoints happen to have traffic.
* **methods**: the (at most 10) methods that cost the most quota units over
  the window's whole hours, then the most requests: ``method``,
  ``requests``, ``units`` and ``units_pct`` (its units / all units of the
  methods in scope over those hours; 0 when none). An older proxy's rollups
  carry no units.
* **updated**: the time of the last successful (non-duplicate) ingest, UTC
  ISO-8601 ``…Z``; null when nothing was ever ingested. An empty batch counts,
  so the addon can use one as a heartbeat when it has no traffic.
* **freshness**: ``"fresh"`` when ``updated`` is at most 10 minutes (600 s)
  old, else ``"unknown"`` (including when ``updated`` is null): the numbers
  may then miss recent traffic because the addon could not deliver it yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from common.config import Endpoint
from common.latency_hist import Hist, merge_into, quantile
from common.usage_wire import Counts
from sidecar.jsonfmt import iso, pct
from sidecar.usage.stats.window import WINDOW_S, WindowTotals

FRESH_S = 600
UNKNOWN_PROVIDER = "unknown"


@dataclass(frozen=True, slots=True)
class EndpointInfo:
    id: str
    provider: str
    network: str
    archive: bool = False
    kind: str = "node-rpc"  # the config's kind; an id no longer in it: as node-rpc

    @property
    def base_label(self) -> str:
        # a node-wss endpoint is another socket of a node, never the same
        # label as its node-rpc: the two would share ``-rpc`` and its ``-2``
        suffix = {"node-rpc": "rpc", "node-wss": "wss"}.get(self.kind, self.kind)
        return f"{self.provider}-{'archive' if self.archive else self.network}-{suffix}"


def endpoint_labels(infos: Iterable[EndpointInfo]) -> dict[str, str]:
    """id -> label ``<provider>-<network or archive>-rpc``, unique: in id order the
    first endpoint of a label keeps it, the next get ``-2``, ``-3`` …"""
    by_id = {i.id: i for i in infos}
    taken: set[str] = set()
    used: dict[str, int] = {}
    out: dict[str, str] = {}
    for eid in sorted(by_id):
        base = by_id[eid].base_label
        n = used.get(base, 0) + 1
        label = base if n == 1 else f"{base}-{n}"
        while label in taken:  # only if some provider name mimics a suffix
            n += 1
            label = f"{base}-{n}"
        used[base] = n
        taken.add(label)
        out[eid] = label
    return out


def freshness(updated: float | None, now: float, fresh_s: float = FRESH_S) -> str:
    return "fresh" if updated is not None and now - updated <= fresh_s else "unknown"


def _ms(value: float | None) -> int | None:
    return None if value is None else round(value)


def summarize(
    totals: WindowTotals,
    *,
    networks: Sequence[str],
    endpoints: Iterable[Endpoint],
    network: str | None = None,
    updated: float | None,
    now: float,
    window_s: int = WINDOW_S,
    methods: Sequence[tuple[str, int, int]] = (),
    units: int | None = None,
) -> dict[str, Any]:
    """The ``GET /api/v1/usage`` document (see the module docstring).

    ``networks`` are the configured networks (``by_network`` lists each of
    them); ``network`` narrows everything but ``by_network`` to one of them.
    ``methods``: (method, requests, units), the top ones; ``units``: all units
    in scope (default: those of ``methods``).
    """
    scope = (network,) if network is not None else tuple(networks)
    by_network = {n: 0 for n in networks}
    total = Counts()
    per_endpoint: dict[str, Counts] = {}
    seen_net: dict[str, str] = {}
    for (net, eid), c in totals.counts.items():
        if net not in by_network:
            continue
        by_network[net] += c.requests
        if eid:
            seen_net.setdefault(eid, net)
        if net not in scope:
            continue
        total.add(c)
        if eid and c.requests:
            per_endpoint.setdefault(eid, Counts()).add(c)

    hist: Hist = {}
    for net in scope:
        merge_into(hist, totals.hists.get(net, {}))

    config_by_id = {e.id: e for e in endpoints}
    infos = {
        e.id: EndpointInfo(e.id, e.provider, e.network, e.archive, e.kind)
        for e in config_by_id.values()
    }
    for eid, net in seen_net.items():
        if eid not in infos:
            infos[eid] = EndpointInfo(eid, UNKNOWN_PROVIDER, net)
    labels = endpoint_labels(infos.values())

    endpoint_requests = sum(c.requests for c in per_endpoint.values())
    rows: list[dict[str, Any]] = [
        {
            "endpoint": labels[eid],
            "id": eid,
            "provider": infos[eid].provider,
            "requests": c.requests,
            "share_pct": pct(c.requests, endpoint_requests),
            "errors_pct": pct(c.errors, c.requests),
            "avg_latency_ms": round(c.latency_ms_sum / c.requests),
        }
        for eid, c in per_endpoint.items()
    ]
    rows.sort(key=lambda r: (-r["requests"], r["endpoint"]))

    n = total.requests
    return {
        "window_s": window_s,
        "requests": n,
        "p50_ms": _ms(quantile(hist, 0.5)) if n else None,
        "p95_ms": _ms(quantile(hist, 0.95)) if n else None,
        "success": {"count": n - total.errors, "pct": pct(n - total.errors, n)},
        "errors": {"count": total.errors, "pct": pct(total.errors, n)},
        "failover": {"count": total.failovers, "pct": pct(total.failovers, n)},
        "cache_hits": {"count": total.cache_hits, "pct": pct(total.cache_hits, n)},
        "by_network": by_network,
        "endpoints": rows,
        "methods": _methods(methods, units),
        "updated": iso(updated),
        "freshness": freshness(updated, now),
    }


def _methods(methods: Sequence[tuple[str, int, int]], units: int | None) -> list[dict[str, Any]]:
    total = sum(u for _, _, u in methods) if units is None else units
    return [
        {"method": m, "requests": n, "units": u, "units_pct": pct(u, total)} for m, n, u in methods
    ]
