"""The sidecar's routing snapshot applied to the addon's upstream pools,
validated strictly (a malformed one is refused whole). The background task
that reads it is ``addon/hooks/snapshot.py``'s ``SnapshotRefresher``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from addon.upstream.pool import TIER_UNPROBED, UpstreamPool


class SnapshotError(ValueError):
    pass


def apply_snapshot(pool: UpstreamPool, doc: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """Set tier, score, best block and archive of the pool's upstreams from one
    snapshot document; upstreams it does not mention count as not probed.
    Returns (tip, finalized). Raises ``SnapshotError`` on a malformed document
    (the pool is then left as it was)."""
    try:
        if not isinstance(doc, Mapping) or not isinstance(doc.get("upstreams"), list):
            raise ValueError("not a snapshot object with an upstreams list")
        tip = _opt_int(doc.get("tip"))
        finalized = _opt_int(doc.get("finalized"))
        updates = {}
        for u in doc["upstreams"]:
            uid = u["id"]
            if uid not in pool.upstreams:
                continue  # not in our config: we have no URL for it
            tier = u["tier"]
            if isinstance(tier, bool) or not isinstance(tier, int) or not 0 <= tier <= 3:
                raise ValueError(f"bad tier {tier!r}")
            score = u.get("score", 1.0)
            if isinstance(score, bool) or not isinstance(score, int | float):
                raise ValueError(f"bad score {score!r}")
            archive = u.get("archive", False)
            if not isinstance(archive, bool):
                raise ValueError(f"bad archive flag {archive!r}")
            # A score outside 0..1 (or NaN) must not make one upstream free.
            score = min(1.0, max(0.01, score)) if score == score else 0.01
            updates[uid] = (tier, score, _opt_int(u.get("best")), archive)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SnapshotError(f"malformed routing snapshot: {e!r}") from None
    for uid, up in pool.upstreams.items():
        if uid in updates:
            up.tier, up.score, up.best, up.archive = updates[uid]
        else:
            up.tier, up.score, up.best, up.archive = TIER_UNPROBED, 1.0, None, up.configured_archive
    return tip, finalized


def _opt_int(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"not an integer: {v!r}")
    return v
