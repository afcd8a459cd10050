"""How long a node that said "too many requests" gets no client traffic (pure).

A node's ``Retry-After`` (seconds, or an HTTP date) is honoured, bounded by
``proxy.upstream_limits.max_backoff_s`` so a broken header cannot bench a node
for a day. Without one, the pause doubles with each 429 in a row (1, 2, 4 ...
seconds), and a success ends the run. Probes are the sidecar's and keep their
own schedule, so a node that has recovered is seen as healthy either way.
"""

from __future__ import annotations

import email.utils

BASE_BACKOFF_S = 1.0
# "Retry-After: 0" still takes the node out of the rotation for the call
# already failing over, not for a whole burst of calls
MIN_BACKOFF_S = 0.25


def parse_retry_after(value: str | None, now_epoch: float) -> float | None:
    """Seconds from now, or None when absent or unreadable (then the back-off
    doubles instead). ``now_epoch``: wall-clock time, for the HTTP-date form."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text[:9]))  # a huge number is bounded by the caller
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT by definition
        return None
    return max(0.0, when.timestamp() - now_epoch)


def backoff_s(strikes: int, retry_after: float | None, max_s: float) -> float:
    """The pause after the ``strikes``-th 429 in a row (1 for the first)."""
    if retry_after is not None:
        return min(max_s, max(MIN_BACKOFF_S, retry_after))
    return min(max_s, BASE_BACKOFF_S * 2 ** min(max(strikes, 1) - 1, 16))
