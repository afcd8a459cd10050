"""The other sections: ``networks:``, ``sidecar:``, ``probe:`` and the endpoint
registry (``registry.endpoints``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from common.config.errors import ConfigError
from common.config.model import (
    FINNEY_GENESIS,
    KINDS,
    TEST_GENESIS,
    Endpoint,
    NetworkConfig,
    ProbeConfig,
    SidecarConfig,
)
from common.config.readers import (
    check_keys,
    expand_env,
    get_bool,
    get_int,
    get_num,
    get_str,
    get_url,
    mapping,
)
from common.endpoint_id import endpoint_id, redact_url

_KIND_SCHEMES = {
    "node-rpc": ("http", "https"),
    "node-wss": ("ws", "wss"),
    "data-artifact": ("http", "https"),
    "sse": ("http", "https"),
}
_NETWORK_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


def parse_networks(raw: Any) -> dict[str, NetworkConfig]:
    section = mapping(raw, "networks")
    defaults = {"finney": FINNEY_GENESIS, "test": TEST_GENESIS}
    names = list(defaults) + [n for n in section if n not in defaults]
    out: dict[str, NetworkConfig] = {}
    for name in names:
        if not isinstance(name, str) or not _NETWORK_NAME.match(name):
            raise ConfigError(f"networks.{name}", "network names are lowercase [a-z0-9_-]")
        key = f"networks.{name}"
        net = mapping(section.get(name), key)
        check_keys(net, ("max_lag_blocks", "genesis"), key)
        genesis = get_str(net, "genesis", defaults.get(name), f"{key}.genesis")
        if genesis is not None and not re.fullmatch(r"0x[0-9a-fA-F]{64}", genesis):
            raise ConfigError(f"{key}.genesis", "must be a 0x-prefixed 32-byte hex hash")
        out[name] = NetworkConfig(
            name=name,
            max_lag_blocks=get_int(net, "max_lag_blocks", 3, f"{key}.max_lag_blocks", minimum=0),
            genesis=genesis.lower() if genesis else None,
        )
    return out


def parse_sidecar(raw: Any, env: Mapping[str, str]) -> SidecarConfig:
    s = mapping(raw, "sidecar")
    check_keys(s, ("host", "port", "url", "token"), "sidecar")
    host = get_str(s, "host", "127.0.0.1", "sidecar.host") or "127.0.0.1"
    port = get_int(s, "port", 8081, "sidecar.port", minimum=0)
    if port > 65535:
        raise ConfigError("sidecar.port", f"must be <= 65535, got {port}")
    url = get_url(s.get("url", f"http://127.0.0.1:{port}"), "sidecar.url", ("http", "https"))
    token = get_str(s, "token", None, "sidecar.token", secret=True)
    if token is not None:
        token = expand_env(token, "sidecar.token", env)
        if not token:
            raise ConfigError("sidecar.token", "must not be empty (use null for no token)")
    return SidecarConfig(host=host, port=port, url=url.rstrip("/"), token=token)


def parse_probe(raw: Any) -> ProbeConfig:
    pr = mapping(raw, "probe")
    check_keys(
        pr,
        ("interval_s", "head_interval_s", "timeout_s", "fail_threshold", "recover_threshold"),
        "probe",
    )
    return ProbeConfig(
        interval_s=get_num(pr, "interval_s", 60.0, "probe.interval_s"),
        head_interval_s=get_num(pr, "head_interval_s", 6.0, "probe.head_interval_s"),
        timeout_s=get_num(pr, "timeout_s", 10.0, "probe.timeout_s"),
        fail_threshold=get_int(pr, "fail_threshold", 2, "probe.fail_threshold", minimum=1),
        recover_threshold=get_int(pr, "recover_threshold", 2, "probe.recover_threshold", minimum=1),
    )


def parse_endpoints(
    raw: Any, networks: Mapping[str, NetworkConfig], env: Mapping[str, str]
) -> tuple[Endpoint, ...]:
    reg = mapping(raw, "registry")
    check_keys(reg, ("endpoints",), "registry")
    items = reg.get("endpoints", [])
    if not isinstance(items, list):
        raise ConfigError("registry.endpoints", "must be a list")
    seen: dict[str, int] = {}
    out = []
    fields = (
        "url",
        "provider",
        "kind",
        "network",
        "subnet",
        "archive",
        "region",
        "notes",
        "max_rps",
        "max_concurrency",
    )
    for i, item in enumerate(items):
        key = f"registry.endpoints[{i}]"
        e = mapping(item, key)
        check_keys(e, fields, key)
        for required in ("url", "provider", "kind", "network"):
            if required not in e:
                raise ConfigError(f"{key}.{required}", "is required")
        kind = get_str(e, "kind", None, f"{key}.kind")
        if kind not in KINDS:
            raise ConfigError(f"{key}.kind", f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
        network = get_str(e, "network", None, f"{key}.network")
        if network is None or network not in networks:
            raise ConfigError(
                f"{key}.network", f"unknown network {network!r} (known: {', '.join(networks)})"
            )
        raw_url = e["url"]
        if isinstance(raw_url, str):
            raw_url = expand_env(raw_url, f"{key}.url", env)
        url = get_url(raw_url, f"{key}.url", _KIND_SCHEMES[kind])
        provider = get_str(e, "provider", None, f"{key}.provider")
        if not provider or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", provider):
            raise ConfigError(f"{key}.provider", "must be a short label of [A-Za-z0-9_.-]")
        eid = endpoint_id(url)
        if eid in seen:
            raise ConfigError(
                f"{key}.url", f"duplicate endpoint: same URL as registry.endpoints[{seen[eid]}]"
            )
        seen[eid] = i
        out.append(
            Endpoint(
                url=url,
                provider=provider,
                kind=kind,
                network=network,
                subnet=get_int(e, "subnet", 0, f"{key}.subnet", minimum=0),
                archive=get_bool(e, "archive", False, f"{key}.archive"),
                region=get_str(e, "region", "", f"{key}.region") or "",
                notes=get_str(e, "notes", "", f"{key}.notes") or "",
                id=eid,
                safe_url=redact_url(url),
                max_rps=_budget(e, "max_rps", key),
                max_concurrency=_budget(e, "max_concurrency", key),
            )
        )
    return tuple(out)


def _budget(e: Mapping[str, Any], name: str, key: str) -> int | None:
    """An optional positive budget; absent or null: unlimited."""
    if e.get(name) is None:
        return None
    return get_int(e, name, 0, f"{key}.{name}", minimum=1)
