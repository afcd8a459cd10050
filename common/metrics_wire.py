"""The live-metrics section of a usage batch: the contract between the proxy
(which counts) and the sidecar (which validates, accumulates and serves
``/metrics``). Both sides import the constants from here.

A usage batch ``POST /api/v1/internal/usage`` (``{batch_id, sent_at, rollups}``,
see ``common.usage_wire``) may carry an optional key ``"metrics"``::

    "metrics": {
      "proxy_id": "host:pid",
      "requests":  [[network, method, outcome, count], ...],
      "duration":  [[network, [n_0, ..., n_11], sum_seconds], ...],
      "attempts":  [[endpoint_id, result, count], ...],
      "failovers": [[network, count], ...],
      "extra":     [[name, {label: value, ...}, count], ...],
      "gauges":    {"ws_connections": n, "spool_batches": n,
                    "client_subscriptions": {method: n, ...},
                    "upstream_subscriptions": {method: n, ...},
                    "upstream_sent_last_s": {endpoint_id: n, ...},
                    "upstream_learned_rps": {endpoint_id: n, ...},
                    "upstream_backoff_s": {endpoint_id: n, ...},
                    "mechanisms_off": {mechanism: 1, ...},
                    "follow_pinned_blocks": {network: n, ...}}
    }

Rules (the sidecar answers 400 when one is broken, as for the rest of a batch):

* ``proxy_id`` (required): ``<host>:<pid>`` of the proxy process that built the
  batch, a printable string of 1..``MAX_LABEL_LEN`` characters. Another process
  of the machine may deliver the batch from the shared spool: the id names the
  one that counted.
* Every other key is optional (absent = nothing to report). Lists hold at most
  ``MAX_ROWS`` rows; two rows with the same labels are added up.
* Counter rows (``requests``, ``attempts``, ``failovers``, ``extra``, and the
  bucket counts of ``duration``) are **deltas since the proxy's previous
  batch**: integers >= 0. A batch id already received is not counted again,
  so a redelivered batch never counts twice. The sidecar's counters start at 0
  when it starts (Prometheus reads that as a counter reset).
* ``network``: one of the config's ``proxy.networks``.
* ``method``: the JSON-RPC method, already collapsed by the proxy to
  ``OTHER_METHOD`` when it is not on the allowlist (so labels stay bounded);
  printable, 1..``MAX_LABEL_LEN`` characters.
* ``outcome``: one of ``OUTCOMES``. ``refused`` (allowlist, size, bad JSON-RPC)
  and ``rate_limited`` (429) are counted here although the 7-day usage summary
  leaves them out.
* ``duration``: the request latency histogram of the network as seen by the
  client (cache hits included): ``len(DURATION_BUCKETS) + 1`` counts, **per
  bucket, not cumulative**: ``n_i`` = calls with
  ``DURATION_BUCKETS[i-1] < seconds <= DURATION_BUCKETS[i]``, the last one the
  calls slower than ``DURATION_BUCKETS[-1]`` (+Inf). ``bucket_index`` below
  computes ``i``. ``sum_seconds``: finite, >= 0.
* ``endpoint_id``: a registry id ``endpoint-srf-<16 hex>``; ``result``: one of
  ``ATTEMPT_RESULTS`` or ``soft:<reason>`` (an answer that was failed over,
  e.g. ``soft:state-discarded``), printable, 1..``MAX_LABEL_LEN`` characters.
* ``extra``: further counters, ``name`` one of ``EXTRA_COUNTERS``; at most
  ``MAX_EXTRA_LABELS`` labels, names ``[a-zA-Z_][a-zA-Z0-9_]*`` (not starting
  with ``__``), values printable strings of at most ``MAX_LABEL_LEN``. The
  expected labels: ``{network}`` for coalesced, hedged, pin fallbacks and subscription moves,
  ``{store}`` (``ratelimit`` or ``cache``) for Redis fallbacks, ``{method,
  tier}`` for quota units (the count is units, not calls), ``{policy}`` for
  refusals (``upstream_capacity``: a call shed after waiting for a node's
  budget), ``{network}`` for upstream waits (calls that queued for a node's
  budget before being sent or shed), ``{endpoint, reason}`` for upstream
  back-offs (a node started or extended a back-off: ``reason`` is
  ``rate-limited`` for a 429 or a JSON-RPC rate-limit error, ``work-limited``
  for a JSON-RPC error saying the node's work limit, ``overloaded`` for a 503
  with ``Retry-After``); ``{network, path}`` for WebSocket client
  messages, counted when their socket ends (``path``: ``direct``, read by
  chainproxy itself, or ``mitmproxy``, through mitmproxy's WebSocket layer);
  ``{endpoint}`` for silent upstreams (a node's subscription socket stopped
  pushing while its network advanced: its subscriptions moved); ``{reason}``
  (``spool_full``, ``memory_full``) for usage dropped, counted in calls;
  ``{network}`` for upstream batches (the batches of clients' single reads
  the proxy sent, and the calls in them).
* ``gauges``: the proxy's current values when it built the batch (not deltas),
  integers >= 0; at most ``MAX_ROWS`` methods per subscription map. The
  ``UPSTREAM_GAUGES`` maps are keyed by ``endpoint_id`` (at most ``MAX_ROWS``
  each): ``upstream_sent_last_s`` the calls this proxy sent the node in the
  last second; ``upstream_learned_rps`` the rate it learned for a node that
  answered 429 without a configured ``max_rps`` (only nodes with a learned
  rate); ``upstream_backoff_s`` the whole seconds left of the node's back-off
  when the batch was built (only nodes backing off; the sidecar reads it as
  "until ``sent_at`` + seconds" and keeps the latest such time over the live
  proxies, the others are summed); ``upstream_quarantined`` 1 per node a
  cross-check quarantined; ``upstream_silent`` 1 per node whose subscription
  socket went silent, until it pushes again (``addon/subs/silence.py``);
  ``upstream_state_lost`` the latest block a node answered "State already
  discarded" for although its measured horizon covered it (only nodes with
  such a correction in force; the sidecar keeps the highest over the live
  proxies and checks that block at the node's next full probe).
  ``mechanisms_off``: 1 per mechanism the proxy runs without (an untested
  mitmproxy or wsproto an operator accepted, ``addon/mitm/versions.py``;
  absent on tested versions), keyed by a printable label of
  1..``MAX_LABEL_LEN`` characters (at most ``MAX_ROWS``). The
  sidecar keeps the latest snapshot of each ``proxy_id`` (by ``sent_at``; an
  older one delivered late from the spool is ignored) and exposes the sum over
  the proxies whose snapshot arrived less than ``GAUGE_TTL_S`` ago — so a
  stopped proxy drops out by itself. ``spool_batches`` is the depth of the
  machine's spool, which its proxies share: the sidecar takes the largest
  value per host (the part of ``proxy_id`` before the last ``:``) and sums
  over hosts.

Heartbeat: a proxy with nothing to report still sends a batch with an empty
``rollups`` list and its ``metrics`` section at least every ``HEARTBEAT_S``
seconds. The sidecar treats it like any batch: it updates the statistics'
``updated`` time (``freshness`` stays ``"fresh"`` while a proxy is alive) and
refreshes the proxy's gauges.

Bounds on the sidecar's side: at most ``MAX_SERIES`` distinct label sets per
metric (a further one is dropped and counted in
``chainproxy_proxy_metrics_dropped_total{metric}``) and ``MAX_PROXIES`` proxies
with live gauges.
"""

from __future__ import annotations

import bisect
from typing import Final

OUTCOMES: Final = ("ok", "cache_hit", "error", "refused", "rate_limited")
OTHER_METHOD: Final = "other"
DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# The usual ones; any ``soft:<reason>`` and other short printable results are accepted too.
ATTEMPT_RESULTS: Final = ("ok", "timeout", "connect-error", "http-5xx", "http-429", "bad-body")
# The ``policy`` label of ``chainproxy_refusals_total``: a bounded set (the quota's
# own policy string is ``rate_limit``; a malformed or oversized body ``request``).
# The sidecar shows each at 0 before its first refusal (a rate() needs the series).
REFUSAL_POLICIES: Final = (
    "allowlist",
    "api_key",
    "max_connections",
    "max_follows",
    "max_subscriptions",
    "rate_limit",
    "request",
    "state_unavailable",
    "subscriptions",
    "upstream_capacity",
)

EXTRA_COUNTERS: Final = (
    "chainproxy_coalesced_total",
    "chainproxy_hedged_total",
    "chainproxy_redis_fallbacks_total",
    "chainproxy_subscription_moves_total",
    "chainproxy_quota_units_total",
    "chainproxy_refusals_total",
    "chainproxy_upstream_waits_total",
    "chainproxy_upstream_backoffs_total",
    "chainproxy_pin_fallbacks_total",
    "chainproxy_prewarm_total",
    "chainproxy_cross_checks_total",
    "chainproxy_finality_lookups_total",
    "chainproxy_cache_purged_total",
    "chainproxy_cache_errors_total",
    "chainproxy_access_log_dropped_total",
    "chainproxy_usage_dropped_total",
    "chainproxy_ws_messages_total",
    "chainproxy_http_direct_requests_total",
    "chainproxy_follow_operations_total",
    "chainproxy_follow_stops_total",
    "chainproxy_upstream_silent_total",
    "chainproxy_upstream_batches_total",
    "chainproxy_upstream_batched_calls_total",
)
# chainproxy_upstream_backoffs_total
BACKOFF_REASONS: Final = ("rate-limited", "work-limited", "overloaded")
GAUGES: Final = ("ws_connections", "spool_batches")
SUBSCRIPTION_GAUGES: Final = ("client_subscriptions", "upstream_subscriptions")
# in ``client_subscriptions``: the chainHead_v1 follows open, beside the legacy methods
FOLLOWS_METHOD: Final = "chainHead_v1_follow"
# Per-network maps (network -> n): the blocks the chainHead_v1 follows hold pinned.
NETWORK_GAUGES: Final = ("follow_pinned_blocks",)
# Per-node maps (endpoint id -> n); see the docstring for what each one holds.
UPSTREAM_GAUGES: Final = (
    "upstream_sent_last_s",
    "upstream_learned_rps",
    "upstream_backoff_s",
    "upstream_quarantined",  # 1 per node a cross-check quarantined (answer-mismatch)
    "upstream_silent",  # 1 per node whose subscription socket went silent
    "upstream_state_lost",  # the latest block a node answered "state discarded" for
)
# Per-mechanism maps (mechanism -> 1): what an untested mitmproxy or wsproto switched off.
MECHANISM_GAUGES: Final = ("mechanisms_off",)

HEARTBEAT_S: Final = 60.0
GAUGE_TTL_S: Final = 120.0
MAX_ROWS: Final = 10_000
MAX_LABEL_LEN: Final = 128
MAX_EXTRA_LABELS: Final = 4
MAX_SERIES: Final = 10_000
MAX_PROXIES: Final = 1_000


def bucket_index(seconds: float) -> int:
    """The ``duration`` bucket of one call: 0 for <= 5 ms … ``len(DURATION_BUCKETS)``
    (+Inf) for slower than 10 s (upper edges are inclusive, as Prometheus' ``le``)."""
    return bisect.bisect_left(DURATION_BUCKETS, seconds)
