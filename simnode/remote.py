"""A simulated node in another process, driven over HTTP: its faults and
counters (``/_sim/``) and plain JSON-RPC calls. The e2e harness and the
benchmarks both drive their nodes this way; blocking calls, no event loop."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from typing import Any


def http_json(url: str, doc: Any | None = None, timeout: float = 10.0) -> Any:
    """GET ``url`` (POST ``doc`` as JSON when given); the decoded JSON answer."""
    data = None if doc is None else json.dumps(doc).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


@dataclass
class RemoteNode:
    url: str
    name: str

    def control(self, **faults: Any) -> Any:
        """Set some faults (see ``simnode.faults.Faults``); the full fault state."""
        return http_json(f"{self.url}/_sim/control", faults)

    def reset(self) -> Any:
        """Clear every fault and counter."""
        return http_json(f"{self.url}/_sim/reset", {})

    def state(self) -> Any:
        return http_json(f"{self.url}/_sim/state")

    def arrivals(self, since: float | None = None) -> Any:
        """The requests the node received (``simnode.arrivals``), oldest first."""
        query = "" if since is None else f"?since={since!r}"
        return http_json(f"{self.url}/_sim/arrivals{query}")["arrivals"]

    def rpc(self, method: str, params: list[Any] | None = None) -> Any:
        """One JSON-RPC call; the whole answer (result or error)."""
        doc = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []}
        return http_json(self.url, doc)
