"""One upstream attempt as the rest of the addon reports it: which node (by
id, never its URL), its verdict, why, and how long it took. Made by the
forward loop (``addon/upstream/forward.py``); read by the call's context, the
live metrics, the access log and mitmweb's annotation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class Attempt:
    endpoint: str  # endpoint id, never the URL (it may hold a secret)
    provider: str
    outcome: Literal["ok", "soft", "hard"]
    reason: str
    latency_ms: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "reason": self.reason or "ok",
            "latency_ms": self.latency_ms,
        }
