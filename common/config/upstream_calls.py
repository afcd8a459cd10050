"""``proxy.coalesce``, ``proxy.head_pinning``, ``proxy.hedge``: the parts that
save upstream calls and cut the tail (issue 15). Each is on by default."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from common.config.errors import ConfigError
from common.config.readers import check_keys, get_bool, get_int, get_num, mapping, str_list

_METHOD = re.compile(r"[A-Za-z][A-Za-z0-9_]{1,63}")


@dataclass(frozen=True, slots=True)
class CoalesceConfig:
    """Identical reads in flight at the same time share one upstream call."""

    enabled: bool = True
    max_keys: int = 10_000  # distinct calls in flight that can be shared; beyond, not shared


@dataclass(frozen=True, slots=True)
class UpstreamBatchingConfig:
    """Cheap single reads of one client that miss in the same loop turn go
    upstream as one JSON-RPC batch (``addon/upstream/batching.py``)."""

    enabled: bool = True
    max_calls: int = 16  # calls in one upstream batch at most


@dataclass(frozen=True, slots=True)
class HeadPinningConfig:
    """Hash-optional state reads sent without a hash get the current best block's."""

    enabled: bool = True
    exclude: frozenset[str] = frozenset()  # methods never pinned
    max_age_s: float = 30.0  # a head seen longer ago than this is not used (2.5 blocks)
    # chain_getHead / chain_getBlockHash (no number) answered with that head while a
    # new-heads subscription is live (addon/subs/head_watch.py); false: asked of a node
    answer_head: bool = True
    # chain_getHeader / chain_getBlock without a hash pinned to that head too
    # (cacheable: a polling fleet's polls become hits). Off by default: without
    # a hash they are "the latest", never cached, and tools rely on that.
    pin_headers: bool = False


@dataclass(frozen=True, slots=True)
class HedgeConfig:
    """A read not answered within the network's recent p95 goes to a second upstream."""

    enabled: bool = True
    quantile: float = 0.95  # of recent good latencies: the hedge delay
    min_delay_ms: float = 50.0
    max_delay_ms: float = 2_000.0
    max_ratio: float = 0.10  # hedges per call, over the recent calls


@dataclass(frozen=True, slots=True)
class UpstreamLimitsConfig:
    """Respecting the nodes' limits (issue 24): their ``Retry-After``, their
    budgets (``registry.endpoints[].max_rps``/``max_concurrency``), and a short
    fair wait, then 503, when every node's budget is spent."""

    enabled: bool = True  # false: a 429 is a plain failure, budgets are ignored
    max_wait_s: float = 1.0  # a call waits at most this for a node's budget
    max_backoff_s: float = 300.0  # the longest Retry-After (or back-off) honoured
    adaptive: bool = True  # learn a budget for a node that answers 429 without one
    heavy_per_node: int = 0  # reads priced by their bytes in flight per node (0: no cap)


@dataclass(frozen=True, slots=True)
class PrewarmConfig:
    """Reads that several clients make at every block, fetched as soon as a new
    block is seen (issue 25): the first client after a block gets a cache hit."""

    max_reads: int = 16  # reads fetched ahead per block and network; 0: off
    min_clients: int = 2  # distinct clients that asked it at each recent block


@dataclass(frozen=True, slots=True)
class CrossCheckConfig:
    """A share of finalized, block-pinned answers asked of a second node too."""

    sample_rate: float = 0.01  # 0: off


def parse_cross_check(raw: Any) -> CrossCheckConfig:
    c = mapping(raw, "proxy.cross_check")
    check_keys(c, ("sample_rate",), "proxy.cross_check")
    rate = get_num(c, "sample_rate", 0.01, "proxy.cross_check.sample_rate", zero_ok=True)
    if rate > 1:
        raise ConfigError("proxy.cross_check.sample_rate", f"must be in [0, 1], got {rate:g}")
    return CrossCheckConfig(sample_rate=rate)


def parse_prewarm(raw: Any) -> PrewarmConfig:
    w = mapping(raw, "proxy.prewarm")
    check_keys(w, ("max_reads", "min_clients"), "proxy.prewarm")
    return PrewarmConfig(
        max_reads=get_int(w, "max_reads", 16, "proxy.prewarm.max_reads", minimum=0),
        min_clients=get_int(w, "min_clients", 2, "proxy.prewarm.min_clients", minimum=1),
    )


def parse_coalesce(raw: Any) -> CoalesceConfig:
    c = mapping(raw, "proxy.coalesce")
    check_keys(c, ("enabled", "max_keys"), "proxy.coalesce")
    return CoalesceConfig(
        enabled=get_bool(c, "enabled", True, "proxy.coalesce.enabled"),
        max_keys=get_int(c, "max_keys", 10_000, "proxy.coalesce.max_keys", minimum=1),
    )


def parse_upstream_batching(raw: Any) -> UpstreamBatchingConfig:
    b = mapping(raw, "proxy.upstream_batching")
    check_keys(b, ("enabled", "max_calls"), "proxy.upstream_batching")
    return UpstreamBatchingConfig(
        enabled=get_bool(b, "enabled", True, "proxy.upstream_batching.enabled"),
        max_calls=get_int(b, "max_calls", 16, "proxy.upstream_batching.max_calls", minimum=2),
    )


def parse_head_pinning(raw: Any) -> HeadPinningConfig:
    h = mapping(raw, "proxy.head_pinning")
    check_keys(
        h, ("enabled", "exclude", "max_age_s", "answer_head", "pin_headers"), "proxy.head_pinning"
    )
    exclude = str_list(h.get("exclude", []), "proxy.head_pinning.exclude")
    for m in exclude:
        if not _METHOD.fullmatch(m):
            raise ConfigError("proxy.head_pinning.exclude", f"bad method name {m!r}")
    return HeadPinningConfig(
        enabled=get_bool(h, "enabled", True, "proxy.head_pinning.enabled"),
        exclude=frozenset(exclude),
        max_age_s=get_num(h, "max_age_s", 30.0, "proxy.head_pinning.max_age_s"),
        answer_head=get_bool(h, "answer_head", True, "proxy.head_pinning.answer_head"),
        pin_headers=get_bool(h, "pin_headers", False, "proxy.head_pinning.pin_headers"),
    )


def parse_upstream_limits(raw: Any) -> UpstreamLimitsConfig:
    u = mapping(raw, "proxy.upstream_limits")
    key = "proxy.upstream_limits."
    check_keys(
        u,
        ("enabled", "max_wait_s", "max_backoff_s", "adaptive", "heavy_per_node"),
        "proxy.upstream_limits",
    )
    d = UpstreamLimitsConfig()
    wait = get_num(u, "max_wait_s", d.max_wait_s, key + "max_wait_s", zero_ok=True)
    if wait > 30:
        raise ConfigError(key + "max_wait_s", f"must be <= 30 (a short wait), got {wait:g}")
    backoff = get_num(u, "max_backoff_s", d.max_backoff_s, key + "max_backoff_s")
    if not 1 <= backoff <= 3600:
        raise ConfigError(key + "max_backoff_s", f"must be in [1, 3600], got {backoff:g}")
    return UpstreamLimitsConfig(
        enabled=get_bool(u, "enabled", True, key + "enabled"),
        max_wait_s=wait,
        max_backoff_s=backoff,
        adaptive=get_bool(u, "adaptive", True, key + "adaptive"),
        heavy_per_node=get_int(u, "heavy_per_node", 0, key + "heavy_per_node", minimum=0),
    )


def parse_hedge(raw: Any) -> HedgeConfig:
    h = mapping(raw, "proxy.hedge")
    key = "proxy.hedge."
    check_keys(
        h, ("enabled", "quantile", "min_delay_ms", "max_delay_ms", "max_ratio"), "proxy.hedge"
    )
    d = HedgeConfig()
    quantile = get_num(h, "quantile", d.quantile, key + "quantile")
    if not 0.5 <= quantile < 1:
        raise ConfigError(key + "quantile", f"must be in [0.5, 1), got {quantile}")
    low = get_num(h, "min_delay_ms", d.min_delay_ms, key + "min_delay_ms")
    high = get_num(h, "max_delay_ms", d.max_delay_ms, key + "max_delay_ms")
    if high < low:
        raise ConfigError(key + "max_delay_ms", f"must be >= min_delay_ms ({low:g}), got {high:g}")
    ratio = get_num(h, "max_ratio", d.max_ratio, key + "max_ratio")
    if ratio > 1:
        raise ConfigError(key + "max_ratio", f"must be <= 1, got {ratio}")
    return HedgeConfig(
        enabled=get_bool(h, "enabled", True, key + "enabled"),
        quantile=quantile,
        min_delay_ms=low,
        max_delay_ms=high,
        max_ratio=ratio,
    )
