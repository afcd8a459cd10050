"""What an endpoint object of the public API says about the node's capacity
(pure): its configured budget (``registry.endpoints[].max_rps``,
``max_concurrency``), the rate the proxies learned from its 429s and the end
of its back-off, from the proxies' reports (``UpstreamLive``, built by
``sidecar.server.handlers.registry.upstream_live`` from the usage service's gauges).

No proxy identity is in it: the reports are already summed (learned rates)
or reduced to the latest end (back-offs) over the live proxies, so the public
API and the dashboard can show them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from common.config import Endpoint
from sidecar.jsonfmt import iso


@dataclass(frozen=True, slots=True)
class UpstreamLive:
    """The proxies' reports by endpoint id (``GaugeTotals`` of
    ``sidecar.metrics.proxy_counters``); empty when none are live."""

    backoff_until: Mapping[str, float] = field(default_factory=dict)  # unix time, in the future
    learned_rps: Mapping[str, int] = field(default_factory=dict)


NO_REPORTS = UpstreamLive()


def capacity(e: Endpoint, live: UpstreamLive) -> dict[str, Any]:
    """``{backoff_until, budget: {max_rps, max_concurrency}, learned_rps}``:
    ``backoff_until`` an ISO time while the node backs off, else null; the
    budget's fields null when the config gives none (unlimited);
    ``learned_rps`` null unless a proxy learned a rate for the node."""
    return {
        "backoff_until": iso(live.backoff_until.get(e.id)),
        "budget": {"max_rps": e.max_rps, "max_concurrency": e.max_concurrency},
        "learned_rps": live.learned_rps.get(e.id),
    }
