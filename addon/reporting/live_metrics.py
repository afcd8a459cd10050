"""Live counters for Prometheus, kept in the proxy and shipped in each usage
batch's ``metrics`` section (the wire format: ``common/metrics_wire.py``); the
sidecar accumulates them and serves ``/metrics``.

Pure: ``count_flow`` is a few dict updates when a flow ends; ``drain`` hands
over the deltas since the last batch and starts again from zero.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Container, Iterable
from typing import Any

from addon.pipeline.context import RpcContext
from addon.quota.costs import runtime_api
from addon.rpc.attempt import Attempt
from addon.rpc.jsonrpc import Call
from common.config.model import CostConfig
from common.metrics_wire import DURATION_BUCKETS, OTHER_METHOD, REFUSAL_POLICIES, bucket_index

UNITS = "chainproxy_quota_units_total"
REFUSALS = "chainproxy_refusals_total"
CROSS_CHECKS = "chainproxy_cross_checks_total"  # {network, outcome}: upstream/cross_check.py
FINALITY_LOOKUPS = "chainproxy_finality_lookups_total"  # {network, outcome}: chain/finality.py
CACHE_PURGED = "chainproxy_cache_purged_total"  # {network, tier}: entries of a quarantined node
CACHE_ERRORS = "chainproxy_cache_errors_total"  # {op}: the edge cache's disk failing (a miss)
PREWARM = "chainproxy_prewarm_total"  # {network, outcome}: see addon/hooks/prewarm.py
ACCESS_LOG_DROPPED = "chainproxy_access_log_dropped_total"  # lines dropped (queue full, disk)
USAGE_DROPPED = "chainproxy_usage_dropped_total"  # {reason}: calls whose records were dropped

_HTTP_5XX = re.compile(r"^http-5\d\d$")


def attempt_result(a: Attempt) -> str:
    """A bounded label for one upstream attempt."""
    if a.outcome == "ok":
        return "ok"
    if a.outcome == "soft":
        return f"soft:{a.reason}"
    if _HTTP_5XX.match(a.reason):
        return "http-5xx"
    return a.reason.split(":", 1)[0] or "error"


class LiveMetrics:
    def __init__(self, methods: Container[str], proxy_id: str | None = None) -> None:
        self._methods = methods  # method labels kept as they are; the rest is "other"
        self.proxy_id = proxy_id or f"{socket.gethostname()}:{os.getpid()}"
        self._requests: dict[tuple[str, str, str], int] = {}
        self._duration: dict[str, tuple[list[int], list[float]]] = {}
        self._attempts: dict[tuple[str, str], int] = {}
        self._failovers: dict[str, int] = {}
        self._extra: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}

    def method_label(self, method: str) -> str:
        return method if method in self._methods else OTHER_METHOD

    def count_request(self, network: str, method: str, outcome: str, n: int = 1) -> None:
        key = (network, self.method_label(method), outcome)
        self._requests[key] = self._requests.get(key, 0) + n

    def observe(self, network: str, seconds: float) -> None:
        entry = self._duration.get(network)
        if entry is None:
            entry = self._duration[network] = ([0] * (len(DURATION_BUCKETS) + 1), [0.0])
        entry[0][bucket_index(seconds)] += 1
        entry[1][0] += max(0.0, seconds)

    def count_attempts(self, network: str, attempts: Iterable[Attempt]) -> None:
        n = 0
        for a in attempts:
            key = (a.endpoint, attempt_result(a))
            self._attempts[key] = self._attempts.get(key, 0) + 1
            n += 1
        if n > 1:
            self._failovers[network] = self._failovers.get(network, 0) + 1

    def count_extra(self, name: str, n: int = 1, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        self._extra[key] = self._extra.get(key, 0) + n

    def count_units(self, call: Call, units: int, tier: str | None, costs: CostConfig) -> None:
        """Quota units charged, by method (``state_call`` by its runtime API when
        the config prices that API: a bounded set) and tier."""
        # on every call's path: the label key built directly (labels in sorted order)
        method = call.method if call.method in self._methods else OTHER_METHOD
        api = runtime_api(call) if costs.runtime_apis else None
        if api is not None and api in costs.runtime_apis:
            method = f"state_call:{api}"
        key = (UNITS, (("method", method), ("tier", tier or "default")))
        self._extra[key] = self._extra.get(key, 0) + units

    def count_refusal(self, policy: str, n: int = 1) -> None:
        self.count_extra(REFUSALS, n, policy=policy)

    def count_flow(self, rpc: RpcContext, outcome: str, status: int, seconds: float) -> None:
        """Everything one finished RPC flow (a POST or a WebSocket message) says."""
        self.observe(rpc.network, seconds)
        self.count_attempts(rpc.network, rpc.attempts)
        parsed = rpc.parsed
        if parsed is None:  # refused before it could be read
            self.count_request(rpc.network, OTHER_METHOD, "refused")
            if rpc.reply is not None:
                self.count_refusal(refusal_policy(rpc.reply.doc))
            return
        limited = status == 429
        if limited:
            self.count_refusal("rate_limit")
        for i, item in enumerate(parsed.items):
            method = item.method if isinstance(item, Call) else OTHER_METHOD
            if limited:
                self.count_request(rpc.network, method, "rate_limited")
                continue
            answer = rpc.answers[i] if i < len(rpc.answers) else None
            outcome = _call_outcome(rpc, i, item, answer)
            if outcome == "refused" and answer is not None:
                self.count_refusal(refusal_policy(answer))
            self.count_request(rpc.network, method, outcome)

    @property
    def pending(self) -> bool:
        return bool(
            self._requests or self._duration or self._attempts or self._failovers or self._extra
        )

    def drain(self, gauges: dict[str, Any]) -> dict[str, Any]:
        """The ``metrics`` section of the next batch; the counters start again at 0."""
        doc = {
            "proxy_id": self.proxy_id,
            "requests": [[*k, v] for k, v in self._requests.items()],
            "duration": [[net, b, round(s[0], 6)] for net, (b, s) in self._duration.items()],
            "attempts": [[*k, v] for k, v in self._attempts.items()],
            "failovers": [[k, v] for k, v in self._failovers.items()],
            "extra": [[name, dict(labels), v] for (name, labels), v in self._extra.items()],
            "gauges": gauges,
        }
        self._requests, self._duration, self._attempts = {}, {}, {}
        self._failovers, self._extra = {}, {}
        return doc


def _call_outcome(rpc: RpcContext, i: int, item: Any, answer: dict[str, Any] | None) -> str:
    if not isinstance(item, Call):
        return "refused"  # not a valid JSON-RPC call
    if i in rpc.hits:
        return "cache_hit"
    if answer is None:
        return "error"
    if answer.get("error") is None:
        return "ok"
    if is_refusal(answer, asked=i in rpc.forwarded):
        return "refused"  # a policy's own answer (allowlist, subscriptions…), not a failure
    return "error"


# typed answers the proxy gives in place of the nodes' words, also after asking
# them: a read of state no node holds, or every node's budget spent (or their
# 429s), is one refusal whether or not a node was asked first (counted alike,
# as the client sees the same answer)
AFTER_ASKING = frozenset({"state_unavailable", "upstream_capacity"})


def is_refusal(answer: Any, *, asked: bool) -> bool:
    """A call item's answer is a refusal, not a failure: a policy's own
    (``data.policy``) that asked no node, or a typed one of ``AFTER_ASKING``.
    The one rule of the live metrics, the access log and the usage records."""
    policy = policy_of(answer)
    return policy is not None and (not asked or policy in AFTER_ASKING)


# the policies an answer names itself (``data.policy``); the quota's and a
# body's are read from their shape (``refusal_policy``)
POLICIES = frozenset(REFUSAL_POLICIES) - {"rate_limit", "request"}


def policy_of(doc: Any) -> Any:
    """An answer's ``error.data.policy``, or None: not a policy's refusal."""
    error = doc.get("error") if isinstance(doc, dict) else None
    data = error.get("data") if isinstance(error, dict) else None
    return data.get("policy") if isinstance(data, dict) else None


def refusal_policy(doc: Any) -> str:
    """The policy a refusal names (``data.policy``), one of a bounded set: the
    quota's own policy string (``100;w=60``) is ``rate_limit``; a malformed
    or oversized body is ``request``."""
    policy = policy_of(doc)
    if policy in POLICIES:
        return policy
    if isinstance(policy, str) and ";w=" in policy:
        return "rate_limit"
    return "request"
