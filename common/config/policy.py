"""The public-gateway policy keys of ``proxy:``: the quota with its unit costs
(``proxy.rate_limit``, ``proxy.rate_limit.costs``) and the tiers
(``proxy.tiers``) that give trusted clients, matched by address or API key,
their own quota and socket caps."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from common.config.errors import ConfigError
from common.config.model import CostConfig, RateLimitConfig, TierConfig
from common.config.readers import (
    check_keys,
    expand_env,
    get_bool,
    get_int,
    get_num,
    mapping,
    parse_trusted,
    str_list,
)

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}$")
_TIER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
MIN_KEY_LEN = 16  # shorter keys are guessable


def parse_rate_limit(
    raw: Any, key: str, *, default_costs: CostConfig | None = None
) -> RateLimitConfig:
    rl = mapping(raw, key)
    check_keys(rl, ("requests", "window_s", "max_clients", "ipv6_prefix", "costs"), key)
    ipv6_prefix = get_int(rl, "ipv6_prefix", 128, f"{key}.ipv6_prefix", minimum=16)
    if ipv6_prefix > 128:
        raise ConfigError(f"{key}.ipv6_prefix", f"must be <= 128, got {ipv6_prefix}")
    window_s = get_num(rl, "window_s", 60.0, f"{key}.window_s")
    if window_s <= 0:
        raise ConfigError(f"{key}.window_s", f"must be > 0, got {window_s}")
    costs = (
        parse_costs(rl["costs"], f"{key}.costs") if "costs" in rl else default_costs or CostConfig()
    )
    return RateLimitConfig(
        requests=get_int(rl, "requests", 100, f"{key}.requests", minimum=1),
        window_s=window_s,
        max_clients=get_int(rl, "max_clients", 100_000, f"{key}.max_clients", minimum=1),
        ipv6_prefix=ipv6_prefix,
        costs=costs,
    )


def parse_costs(raw: Any, key: str) -> CostConfig:
    c = mapping(raw, key)
    fields = (
        "enabled",
        "methods",
        "runtime_apis",
        "keys_per_unit",
        "storage_keys_per_unit",
        "free_bytes",
        "bytes_per_unit",
    )
    check_keys(c, fields, key)
    d = CostConfig()
    return CostConfig(
        enabled=get_bool(c, "enabled", d.enabled, f"{key}.enabled"),
        methods=_unit_table(c.get("methods"), f"{key}.methods"),
        runtime_apis=_unit_table(c.get("runtime_apis"), f"{key}.runtime_apis"),
        keys_per_unit=get_int(
            c, "keys_per_unit", d.keys_per_unit, f"{key}.keys_per_unit", minimum=1
        ),
        storage_keys_per_unit=get_int(
            c,
            "storage_keys_per_unit",
            d.storage_keys_per_unit,
            f"{key}.storage_keys_per_unit",
            minimum=1,
        ),
        free_bytes=get_int(c, "free_bytes", d.free_bytes, f"{key}.free_bytes", minimum=0),
        bytes_per_unit=get_int(
            c, "bytes_per_unit", d.bytes_per_unit, f"{key}.bytes_per_unit", minimum=1024
        ),
    )


def _unit_table(raw: Any, key: str) -> dict[str, int]:
    table = mapping(raw, key)
    out = {}
    for name in table:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(key, f"bad name {name!r}: a method or runtime API name")
        out[name] = get_int(table, name, 1, f"{key}.{name}", minimum=0)
    return out


def parse_tiers(
    raw: Any, env: Mapping[str, str], *, default: RateLimitConfig
) -> tuple[TierConfig, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("proxy.tiers", "must be a list of {name, cidrs, keys, rate_limit}")
    tiers: list[TierConfig] = []
    names: set[str] = set()
    keys_seen: set[str] = set()
    for i, item in enumerate(raw):
        key = f"proxy.tiers[{i}]"
        t = mapping(item, key)
        check_keys(
            t,
            (
                "name",
                "cidrs",
                "keys",
                "rate_limit",
                "max_connections_per_client",
                "max_subscriptions_per_client",
            ),
            key,
        )
        name = t.get("name")
        if not isinstance(name, str) or not _TIER_NAME.match(name):
            raise ConfigError(f"{key}.name", "must be a short name (letters, digits, _ . -)")
        if name in names:
            raise ConfigError(f"{key}.name", f"tier {name!r} is named twice")
        names.add(name)
        cidrs = parse_trusted(str_list(t.get("cidrs", []), f"{key}.cidrs"), f"{key}.cidrs")
        keys = []
        for j, k in enumerate(str_list(t.get("keys", []), f"{key}.keys")):
            value = expand_env(k, f"{key}.keys[{j}]", env)
            if len(value) < MIN_KEY_LEN:
                # the value itself is never echoed: it is a secret
                raise ConfigError(
                    f"{key}.keys[{j}]", f"too short: at least {MIN_KEY_LEN} characters"
                )
            if value in keys_seen:
                raise ConfigError(f"{key}.keys[{j}]", "the same key is given twice")
            keys_seen.add(value)
            keys.append(value)
        if not cidrs and not keys:
            raise ConfigError(key, "a tier needs cidrs or keys (or both) to match its clients")
        tiers.append(
            TierConfig(
                name=name,
                cidrs=cidrs,
                keys=tuple(keys),
                rate_limit=parse_rate_limit(
                    t.get("rate_limit"), f"{key}.rate_limit", default_costs=default.costs
                )
                if "rate_limit" in t
                else default,
                max_connections_per_client=_optional_int(t, "max_connections_per_client", key),
                max_subscriptions_per_client=_optional_int(t, "max_subscriptions_per_client", key),
            )
        )
    return tuple(tiers)


def _optional_int(t: Mapping[str, Any], name: str, key: str) -> int | None:
    if name not in t:
        return None
    return get_int(t, name, 1, f"{key}.{name}", minimum=1)
