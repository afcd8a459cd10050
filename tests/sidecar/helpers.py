"""What the sidecar's tests share: probe results, a probe factory with fixed answers."""

from __future__ import annotations

from typing import Any

from common.config import Config, Endpoint
from sidecar.probing.results import LIVE, ProbeResult


def fake_factory(heights: dict[str, int | None]) -> Any:
    """Provider -> best height (None = dead)."""

    def factory(_session: Any, _config: Config) -> Any:
        async def probe(e: Endpoint, kind: str) -> ProbeResult:
            best = heights.get(e.provider)
            if best is None:
                return ProbeResult(e.id, 1000.0, kind, "dead")  # type: ignore[arg-type]
            return ProbeResult(e.id, 1000.0, kind, "live", 20, best, best - 2)  # type: ignore[arg-type]

        return probe

    return factory


def probe_result(eid: str, at: float, classification: str = LIVE, **kw: object) -> ProbeResult:
    """A full probe of ``eid`` at ``at``."""
    return ProbeResult(eid, at, "full", classification, **kw)  # type: ignore[arg-type]
