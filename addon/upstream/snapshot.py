"""The sidecar's routing snapshot applied to the addon's upstream pools,
validated strictly (a malformed one is refused whole). The background task
that reads it is ``addon/hooks/snapshot.py``'s ``SnapshotRefresher``.

Each upstream's state horizon (``horizon``, ``horizon_lost``, ``keeps``,
``horizon_rounds``: optional, so an older sidecar's snapshot still applies)
is taken too, and this process's corrections settled against it
(``horizons.settle``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from addon.chain.horizons import settle
from addon.upstream.pool import TIER_UNPROBED, Upstream, UpstreamPool

# the sidecar's classification of a node whose genesis is another chain's
# (sidecar/probing/results.py): no call goes to it until a full probe clears it
WRONG_CHAIN = "wrong-chain"


class SnapshotError(ValueError):
    pass


def apply_snapshot(pool: UpstreamPool, doc: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """Set tier, score, best and finalized blocks and archive of the pool's upstreams from one
    snapshot document; upstreams it does not mention count as not probed.
    Returns (tip, finalized). Raises ``SnapshotError`` on a malformed document
    (the pool is then left as it was)."""
    try:
        if not isinstance(doc, Mapping) or not isinstance(doc.get("upstreams"), list):
            raise ValueError("not a snapshot object with an upstreams list")
        tip = _opt_int(doc.get("tip"))
        finalized = _opt_int(doc.get("finalized"))
        updates = {}
        horizons = {}
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
            foreign = u.get("classification") == WRONG_CHAIN
            best, fin = _opt_int(u.get("best")), _opt_int(u.get("finalized"))
            updates[uid] = (tier, score, best, fin, archive, foreign)
            horizons[uid] = _horizon(u)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise SnapshotError(f"malformed routing snapshot: {e!r}") from None
    for uid, up in pool.upstreams.items():
        if uid in updates:
            up.tier, up.score, up.best, up.finalized, up.archive, up.foreign = updates[uid]
            _set_horizon(up, *horizons[uid])
        else:
            up.tier, up.score, up.best, up.archive = TIER_UNPROBED, 1.0, None, up.configured_archive
            up.finalized = None
            up.foreign = False
            _set_horizon(up, None, None, None, up.horizon_rounds)
    pool.tip = tip
    return tip, finalized


def _horizon(u: Mapping[str, Any]) -> tuple[int | None, int | None, int | None, int]:
    horizon, lost, keeps = (_opt_int(u.get(k)) for k in ("horizon", "horizon_lost", "keeps"))
    rounds = u.get("horizon_rounds", 0)
    if isinstance(rounds, bool) or not isinstance(rounds, int):
        raise ValueError(f"bad horizon_rounds {rounds!r}")
    for v in (horizon, lost, keeps, rounds):
        if v is not None and v < 0:
            raise ValueError(f"negative horizon value {v!r}")
    return horizon, lost, keeps, rounds


def _set_horizon(
    up: Upstream, horizon: int | None, lost: int | None, keeps: int | None, rounds: int
) -> None:
    up.horizon, up.horizon_lost, up.keeps, up.horizon_rounds = horizon, lost, keeps, rounds
    settle(up)


def _opt_int(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"not an integer: {v!r}")
    return v
