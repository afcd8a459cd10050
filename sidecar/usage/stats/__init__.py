"""Usage statistics, the pure part: the addon's batches in, the public summary out.

* ``sidecar.usage.stats.batch``: a batch of per-minute rollups (the wire:
  ``common.usage_wire``) and its metrics section, validated all or nothing
  (``parse_batch``);
* ``sidecar.usage.stats.window``: the 7-day window and the totals over it
  (``WindowTotals``);
* ``sidecar.usage.stats.summary``: the ``GET /api/v1/usage`` document from those
  totals (``summarize``).

The store that keeps the totals (``sidecar.usage.store``) and the service
that runs it (``sidecar.usage.service``) do the I/O. Modules inside the
sidecar import from the submodules; the names below are the package's face
for code outside it (e.g. ``bench/bench_stats.py``).
"""

from common.usage_wire import MAX_ROLLUPS, BatchError, Counts, Rollup, parse_rollup
from sidecar.usage.stats.batch import Batch, parse_batch
from sidecar.usage.stats.summary import EndpointInfo, endpoint_labels, freshness, summarize
from sidecar.usage.stats.window import (
    WINDOW_S,
    WindowTotals,
    totals_of,
    window_start_minute,
)

__all__ = [
    "MAX_ROLLUPS",
    "WINDOW_S",
    "Batch",
    "BatchError",
    "Counts",
    "EndpointInfo",
    "Rollup",
    "WindowTotals",
    "endpoint_labels",
    "freshness",
    "parse_batch",
    "parse_rollup",
    "summarize",
    "totals_of",
    "window_start_minute",
]
