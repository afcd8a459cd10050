"""The ``proxy:`` section: what the addon does with each call (networks,
allowlist, trusted proxies, failover, cache, usage records, size limits,
WebSocket); the quota and tiers are ``policy.py``'s."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from common.allowlist_default import DEFAULT_ALLOWLIST
from common.config.errors import ConfigError
from common.config.model import (
    CacheConfig,
    FailoverConfig,
    NetworkConfig,
    ProxyConfig,
    UsageConfig,
    WebSocketConfig,
)
from common.config.new_spec import parse_new_spec
from common.config.policy import parse_rate_limit, parse_tiers
from common.config.readers import (
    check_keys,
    get_bool,
    get_int,
    get_num,
    mapping,
    parse_trusted,
    str_list,
)
from common.config.upstream_calls import (
    parse_coalesce,
    parse_cross_check,
    parse_head_pinning,
    parse_hedge,
    parse_prewarm,
    parse_upstream_batching,
    parse_upstream_limits,
)

# proxy.upstream_client: the lean client, or aiohttp's (an operator's way back)
UPSTREAM_CLIENTS = ("lean", "aiohttp")


def parse_proxy(
    raw: Any, networks: Mapping[str, NetworkConfig], env: Mapping[str, str] | None = None
) -> ProxyConfig:
    env = {} if env is None else env
    p = mapping(raw, "proxy")
    check_keys(
        p,
        (
            "networks",
            "allowlist",
            "allowlist_extra",
            "rate_limit",
            "trusted_proxies",
            "failover",
            "cache",
            "usage",
            "max_body_bytes",
            "max_batch",
            "max_response_bytes",
            "upstream_client",
            "sidecar_timeout_s",
            "read_timeout_s",
            "drain_s",
            "websocket",
            "coalesce",
            "upstream_batching",
            "head_pinning",
            "hedge",
            "tiers",
            "upstream_limits",
            "prewarm",
            "cross_check",
            "new_spec",
            "access_log",
            "access_log_client",
        ),
        "proxy",
    )
    nets = tuple(str_list(p.get("networks", ["finney", "test"]), "proxy.networks"))
    for n in nets:
        if n not in networks:
            raise ConfigError(
                "proxy.networks", f"unknown network {n!r} (known: {', '.join(networks)})"
            )
    if not nets:
        raise ConfigError("proxy.networks", "must name at least one network")
    if len(set(nets)) != len(nets):
        twice = next(n for n in nets if nets.count(n) > 1)
        raise ConfigError("proxy.networks", f"names {twice!r} twice")

    allow = (
        frozenset(str_list(p["allowlist"], "proxy.allowlist"))
        if "allowlist" in p
        else (DEFAULT_ALLOWLIST)
    )
    allow |= frozenset(str_list(p.get("allowlist_extra", []), "proxy.allowlist_extra"))

    rate_limit = parse_rate_limit(p.get("rate_limit"), "proxy.rate_limit")
    trusted = parse_trusted(
        str_list(p.get("trusted_proxies", []), "proxy.trusted_proxies"), "proxy.trusted_proxies"
    )

    fo = mapping(p.get("failover"), "proxy.failover")
    check_keys(
        fo,
        ("max_attempts", "attempt_timeout_s", "deadline_s", "eject_after", "eject_cooldown_s"),
        "proxy.failover",
    )
    failover = FailoverConfig(
        max_attempts=get_int(fo, "max_attempts", 3, "proxy.failover.max_attempts", minimum=1),
        attempt_timeout_s=get_num(fo, "attempt_timeout_s", 5.0, "proxy.failover.attempt_timeout_s"),
        deadline_s=get_num(fo, "deadline_s", 15.0, "proxy.failover.deadline_s"),
        eject_after=get_int(fo, "eject_after", 3, "proxy.failover.eject_after", minimum=1),
        eject_cooldown_s=get_num(fo, "eject_cooldown_s", 30.0, "proxy.failover.eject_cooldown_s"),
    )

    c = mapping(p.get("cache"), "proxy.cache")
    check_keys(c, ("size_limit_mb", "enabled", "methods"), "proxy.cache")
    methods = mapping(c.get("methods"), "proxy.cache.methods")
    for m in methods:
        if not isinstance(m, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{1,63}", m):
            raise ConfigError("proxy.cache.methods", f"bad method name {m!r}")
        get_int(methods, m, 0, f"proxy.cache.methods.{m}", minimum=0)
    cache = CacheConfig(
        # in bytes it must fit SQLite's 64 bits (diskcache keeps it there): 1 EiB at most
        size_limit_mb=get_int(
            c, "size_limit_mb", 512, "proxy.cache.size_limit_mb", minimum=1, maximum=2**40
        ),
        enabled=get_bool(c, "enabled", True, "proxy.cache.enabled"),
        methods=dict(methods),
    )

    u = mapping(p.get("usage"), "proxy.usage")
    check_keys(u, ("flush_s", "spool_max_batches", "memory_max_batches"), "proxy.usage")
    usage = UsageConfig(
        flush_s=get_num(u, "flush_s", 2.0, "proxy.usage.flush_s"),
        spool_max_batches=get_int(
            u, "spool_max_batches", 10_000, "proxy.usage.spool_max_batches", minimum=1
        ),
        memory_max_batches=get_int(
            u, "memory_max_batches", 1000, "proxy.usage.memory_max_batches", minimum=1
        ),
    )

    return ProxyConfig(
        networks=nets,
        allowlist=allow,
        rate_limit=rate_limit,
        trusted_proxies=trusted,
        failover=failover,
        cache=cache,
        usage=usage,
        max_body_bytes=get_int(p, "max_body_bytes", 1_048_576, "proxy.max_body_bytes", minimum=64),
        max_batch=get_int(p, "max_batch", 100, "proxy.max_batch", minimum=1),
        max_response_bytes=get_int(
            p, "max_response_bytes", 64 * 1_048_576, "proxy.max_response_bytes", minimum=1024
        ),
        upstream_client=_choice(p, "upstream_client", "lean", UPSTREAM_CLIENTS),
        sidecar_timeout_s=get_num(p, "sidecar_timeout_s", 10.0, "proxy.sidecar_timeout_s"),
        read_timeout_s=get_num(p, "read_timeout_s", 30.0, "proxy.read_timeout_s"),
        drain_s=get_num(p, "drain_s", 10.0, "proxy.drain_s"),
        websocket=_websocket(p.get("websocket")),
        coalesce=parse_coalesce(p.get("coalesce")),
        upstream_batching=parse_upstream_batching(p.get("upstream_batching")),
        head_pinning=parse_head_pinning(p.get("head_pinning")),
        hedge=parse_hedge(p.get("hedge")),
        tiers=parse_tiers(p.get("tiers"), env, default=rate_limit),
        upstream_limits=parse_upstream_limits(p.get("upstream_limits")),
        prewarm=parse_prewarm(p.get("prewarm")),
        cross_check=parse_cross_check(p.get("cross_check")),
        new_spec=parse_new_spec(p.get("new_spec")),
        access_log=_access_log(p.get("access_log")),
        access_log_client=_choice(
            p, "access_log_client", "truncated", ("full", "truncated", "hashed")
        ),
    )


def _websocket(raw: Any) -> WebSocketConfig:
    w = mapping(raw, "proxy.websocket")
    key = "proxy.websocket."
    check_keys(w, tuple(WebSocketConfig.__dataclass_fields__), "proxy.websocket")
    d = WebSocketConfig()
    return WebSocketConfig(
        subscriptions=get_bool(w, "subscriptions", d.subscriptions, key + "subscriptions"),
        max_subscriptions=get_int(
            w, "max_subscriptions", d.max_subscriptions, key + "max_subscriptions", minimum=1
        ),
        max_connections_per_client=get_int(
            w,
            "max_connections_per_client",
            d.max_connections_per_client,
            key + "max_connections_per_client",
            minimum=1,
        ),
        max_subscriptions_per_client=get_int(
            w,
            "max_subscriptions_per_client",
            d.max_subscriptions_per_client,
            key + "max_subscriptions_per_client",
            minimum=1,
        ),
        max_queued_notifications=get_int(
            w,
            "max_queued_notifications",
            d.max_queued_notifications,
            key + "max_queued_notifications",
            minimum=1,
        ),
        max_buffer_bytes=get_int(
            w, "max_buffer_bytes", d.max_buffer_bytes, key + "max_buffer_bytes", minimum=4096
        ),
        upstream_linger_s=get_num(
            w, "upstream_linger_s", d.upstream_linger_s, key + "upstream_linger_s"
        ),
        stall_s=get_num(w, "stall_s", d.stall_s, key + "stall_s"),
        ping_interval_s=get_num(
            w, "ping_interval_s", d.ping_interval_s, key + "ping_interval_s", zero_ok=True
        ),
        ping_timeout_s=get_num(w, "ping_timeout_s", d.ping_timeout_s, key + "ping_timeout_s"),
    )


def _access_log(raw: Any) -> str | None:
    """``off`` (or absent, or false): no access log; ``stdout``; or a file path."""
    if raw is None or raw is False or raw == "off":
        return None
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError("proxy.access_log", "must be off, stdout or a file path")
    return raw


def _choice(p: Mapping[str, Any], name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = p.get(name, default)
    if value not in allowed:
        raise ConfigError(f"proxy.{name}", f"must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)
