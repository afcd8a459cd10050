"""Where a call's time went, from the proxy's own access log (pure parsing):
``latency_ms`` is the proxy's whole time for it, ``upstream_ms`` the time of
the node attempt whose answer was used (``addon/reporting/access_log.py``), so
a client's time splits into the node's share, the proxy's own share (its
work and any wait for a node's budget) and what is left (the client, the
kernel, mitmproxy before chainproxy's hook). Scenario 13 reads its light
clients' calls with it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Shares:
    proxy_ms: list[float] = field(default_factory=list)  # latency_ms: the proxy's whole time
    upstream_ms: list[float] = field(default_factory=list)  # 0 for a call no node answered
    own_ms: list[float] = field(default_factory=list)  # latency_ms - upstream_ms


def read_shares(log: Path, clients: set[str], methods: set[str] | None = None) -> Shares:
    """The calls of ``clients`` (addresses as logged: ``access_log_client: full``)
    in ``log``; only ``methods`` when given."""
    out = Shares()
    if not log.exists():
        return out
    for line in log.read_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # a line cut by a write still under way
        if doc.get("client") not in clients or doc.get("outcome") != "ok":
            continue
        if methods is not None and doc.get("method") not in methods:
            continue
        total = float(doc["latency_ms"])
        node = float(doc.get("upstream_ms") or 0)
        out.proxy_ms.append(total)
        out.upstream_ms.append(node)
        out.own_ms.append(max(0.0, total - node))
    return out
