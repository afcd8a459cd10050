"""A mergeable latency histogram: logarithmic buckets, ~1 % relative error.

The scheme (shared by the addon, which pre-aggregates, and the sidecar, which
stores per-minute rollups): a latency of ``v`` ms goes to bucket
``floor(log(v) / log(GAMMA))`` for ``v >= 1`` and to bucket ``0`` below 1 ms
(``-1`` for 0 or less). A bucket's representative value is the geometric middle of
its bounds, so any quantile read back is within ``(GAMMA - 1) / 2`` ≈ 1 % of
the true value (plus the bucket-0 floor). Histograms are sparse
``{bucket: count}`` dicts: merging is adding counts, storage per rollup is a
few hundred entries at most whatever the request count (1 ms .. 1 h spans
~770 buckets).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

GAMMA = 1.02
_LOG_GAMMA = math.log(GAMMA)

Hist = dict[int, int]


def bucket_of(ms: float) -> int:
    if ms <= 0:
        return -1
    if ms < 1:
        return 0
    return int(math.log(ms) / _LOG_GAMMA)


def value_of(bucket: int) -> float:
    """The representative latency (ms) of a bucket."""
    if bucket < 0:
        return 0.0
    if bucket == 0:
        return 1.0  # (0, GAMMA): sub-millisecond calls read back as 1 ms
    low, high = GAMMA**bucket, GAMMA ** (bucket + 1)
    return math.sqrt(low * high)


def add(hist: Hist, ms: float, count: int = 1) -> None:
    b = bucket_of(ms)
    hist[b] = hist.get(b, 0) + count


# a histogram as held (int buckets) or as read off the wire (JSON's str keys)
AnyHist = Mapping[int, int] | Mapping[str, int] | Mapping[int | str, int]


def merge_into(into: Hist, other: AnyHist) -> None:
    for b, n in other.items():
        k = int(b)
        into[k] = into.get(k, 0) + int(n)


def merged(hists: Iterable[AnyHist]) -> Hist:
    out: Hist = {}
    for h in hists:
        merge_into(out, h)
    return out


def quantile(hist: Mapping[int, int], q: float) -> float | None:
    """The q-quantile (0 < q <= 1) of the latencies in ``hist``; None if empty."""
    total = sum(hist.values())
    if total == 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= rank:
            return value_of(b)
    return value_of(max(hist))


def to_wire(hist: Mapping[int, int]) -> dict[str, int]:
    """JSON object keys are strings."""
    return {str(b): n for b, n in hist.items() if n}


def from_wire(doc: Mapping[str, int]) -> Hist:
    out: Hist = {}
    for k, v in doc.items():
        b = int(k)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0 or not -1 <= b <= 5000:
            raise ValueError(f"bad histogram entry {k!r}: {v!r}")
        if v:
            out[b] = out.get(b, 0) + v
    return out
