"""What the routing snapshot's tests share: the time they run at, endpoints
by provider, and health values of a healthy and a degraded endpoint."""

from __future__ import annotations

from typing import Any

from common.config import Config, Endpoint
from sidecar.probing.health import Health

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def by_provider(cfg: Config) -> dict[str, Endpoint]:
    return {e.provider: e for e in cfg.endpoints}


def ok(best: int | None = None, finalized: int | None = None, **kw: Any) -> Health:
    """A healthy, probed endpoint."""
    return Health(
        status="OK",
        classification="live",
        last_probe_at=NOW - 5,
        last_ok_at=NOW - 5,
        best=best,
        finalized=finalized,
        recent=(True,),
        **kw,
    )


def degraded(best: int | None = None, finalized: int | None = None, **kw: Any) -> Health:
    return Health(
        status="Degraded",
        classification="dead",
        consecutive_failures=2,
        last_probe_at=NOW - 5,
        best=best,
        finalized=finalized,
        recent=(True, False, False),
        message="dead",
        **kw,
    )
