"""``chainproxy check-config``: one paragraph that says what a valid config
deploys, so an operator can read back what they wrote (pure: a ``Config`` in,
text out; no secret ever appears: URLs are the redacted ones)."""

from __future__ import annotations

from collections import Counter

from common.config import Config
from common.config.readers import shown_url


def describe(config: Config, path: str) -> str:
    p = config.proxy
    nets = []
    for net in p.networks:
        kinds = Counter(e.kind for e in config.endpoints if e.network == net)
        archive = sum(1 for e in config.endpoints if e.network == net and e.archive)
        parts = [f"{n} {kind}" for kind, n in sorted(kinds.items())] or ["no endpoints"]
        if archive:
            parts.append(f"{archive} archive")
        nets.append(f"{net} ({', '.join(parts)})")
    rl = p.rate_limit
    per = "client" if rl.ipv6_prefix == 128 else f"client (IPv6 per /{rl.ipv6_prefix})"
    fo = p.failover
    cache = (
        f"edge cache {p.cache.size_limit_mb} MiB in {config.data_dir / 'cache'}"
        + (f" (+{len(p.cache.methods)} hash-pinned methods)" if p.cache.methods else "")
        if p.cache.enabled
        else "edge cache off"
    )
    if config.redis is None:
        scale = "no redis: the quota is per proxy process and the cache per machine"
    else:
        r = config.redis
        scale = (
            f"redis {r.safe_url} (prefix {r.key_prefix!r}, {r.timeout_ms:g} ms bound): "
            "one quota per client across processes and a shared cache tier"
        )
    ws = p.websocket
    subs = (
        f"WebSocket subscriptions on (≤{ws.max_subscriptions} per socket)"
        if ws.subscriptions
        else "WebSocket subscriptions off"
    )
    costs = rl.costs
    priced = (
        "heavy reads priced by keys and bytes"
        + (
            f", {len(costs.methods) + len(costs.runtime_apis)} operator prices"
            if costs.methods or costs.runtime_apis
            else ""
        )
        if costs.enabled
        else "every call 1 unit"
    )
    tiers = "; ".join(
        f"tier {t.name}: {t.rate_limit.requests} units per {t.rate_limit.window_s:g} s "
        f"({len(t.cidrs)} CIDRs, {len(t.keys)} keys)"
        for t in p.tiers
    )
    sockets = f"≤{ws.max_connections_per_client} sockets per client"
    lim = p.upstream_limits
    budgeted = sum(1 for e in config.endpoints if e.max_rps or e.max_concurrency)
    upstream = (
        f"nodes' limits respected (Retry-After ≤{lim.max_backoff_s:g} s, "
        f"{budgeted} endpoints with a budget"
        + (", rates learned after a 429" if lim.adaptive else "")
        + f", waits ≤{lim.max_wait_s:g} s then 503)"
        if lim.enabled
        else "nodes' limits off (a 429 is a plain failure)"
    )
    sidecar = config.sidecar
    token = "token set" if sidecar.token else "no token: internal API open to local callers"
    return (
        f"{path}: OK. Serves {', '.join(f'/rpc/v1/{n}' for n in p.networks)} from "
        f"{len(config.endpoints)} registry endpoints: {'; '.join(nets)}. "
        f"Rate limit {rl.requests} units per {rl.window_s:g} s per {per} (a plain "
        f"call 1, {priced})"
        f"{f', {len(p.trusted_proxies)} trusted proxies' if p.trusted_proxies else ''}; "
        f"{f'{tiers}; ' if tiers else ''}{sockets}; "
        f"failover up to {fo.max_attempts} attempts ({fo.attempt_timeout_s:g} s each, "
        f"{fo.deadline_s:g} s deadline); {upstream}; {cache}; {subs}; {scale}. "
        f"Sidecar on {sidecar.host}:{sidecar.port} (proxies reach it at {shown_url(sidecar.url)}, "
        f"{token}); probes every {config.probe.interval_s:g} s (heads every "
        f"{config.probe.head_interval_s:g} s); data in {config.data_dir}."
    )
