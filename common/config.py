"""Deployment configuration: one YAML file, read by both the addon and the sidecar.

``parse_config(dict)`` is pure and turns the first problem it finds into a
``ConfigError`` whose one-line message names the key, so start-up stops with a
clear line instead of running half-configured.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from common.allowlist_default import DEFAULT_ALLOWLIST
from common.endpoint_id import endpoint_id, redact_url

KINDS = ("node-rpc", "node-wss", "data-artifact", "sse")
_KIND_SCHEMES = {
    "node-rpc": ("http", "https"),
    "node-wss": ("ws", "wss"),
    "data-artifact": ("http", "https"),
    "sse": ("http", "https"),
}
_NETWORK_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

FINNEY_GENESIS = "0x2f0555cc76fc2840a25a6ea3b9637146806f1f44b090c175ffde2a7e5ab36c03"
TEST_GENESIS = "0x8f9cf856bf558a14440e75569c9e58594757048d7b3a84b5d25f6bd978263105"


class ConfigError(ValueError):
    """A configuration problem; ``str()`` is one line naming the key."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config error: {key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    requests: int = 100
    window_s: float = 60.0
    max_clients: int = 100_000  # bound on tracked clients; idle ones are evicted first
    ipv6_prefix: int = 128  # IPv6 clients share a quota per /ipv6_prefix (64: per subnet)

    @property
    def policy(self) -> str:
        return f"{self.requests};w={self.window_s:g}"


@dataclass(frozen=True, slots=True)
class FailoverConfig:
    max_attempts: int = 3
    attempt_timeout_s: float = 5.0
    deadline_s: float = 15.0
    eject_after: int = 3  # consecutive failures before passive ejection
    eject_cooldown_s: float = 30.0


@dataclass(frozen=True, slots=True)
class CacheConfig:
    size_limit_mb: int = 512
    enabled: bool = True
    # Extra block-hash-pinned methods to cache: method -> index of the block-hash
    # param (chain_getBlock/chain_getHeader/chain_getBlockHash are always cached).
    methods: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UsageConfig:
    flush_s: float = 2.0  # records reach the sidecar within this (plus delivery)
    spool_max_batches: int = 10_000  # past it the oldest batch is dropped (counted, logged)


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    networks: tuple[str, ...] = ("finney", "test")
    allowlist: frozenset[str] = DEFAULT_ALLOWLIST
    rate_limit: RateLimitConfig = field(default_factory=RateLimitConfig)
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    failover: FailoverConfig = field(default_factory=FailoverConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    usage: UsageConfig = field(default_factory=UsageConfig)
    max_body_bytes: int = 1_048_576
    max_batch: int = 100
    max_response_bytes: int = 64 * 1_048_576  # an upstream answer larger than this fails over
    sidecar_timeout_s: float = 10.0  # for dashboard/API requests passed to the sidecar


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    host: str = "127.0.0.1"
    port: int = 8081
    url: str = "http://127.0.0.1:8081"
    token: str | None = None


@dataclass(frozen=True, slots=True)
class ProbeConfig:
    interval_s: float = 60.0
    head_interval_s: float = 6.0
    timeout_s: float = 10.0
    fail_threshold: int = 2
    recover_threshold: int = 2


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    name: str
    max_lag_blocks: int = 3
    genesis: str | None = None


@dataclass(frozen=True, slots=True)
class Endpoint:
    url: str  # may hold a secret: never log or publish it, use ``safe_url``
    provider: str
    kind: str
    network: str
    subnet: int = 0
    archive: bool = False
    region: str = ""
    notes: str = ""
    id: str = ""
    safe_url: str = ""


@dataclass(frozen=True, slots=True)
class Config:
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    sidecar: SidecarConfig = field(default_factory=SidecarConfig)
    data_dir: Path = Path("./data")
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    networks: Mapping[str, NetworkConfig] = field(default_factory=dict)
    endpoints: tuple[Endpoint, ...] = ()

    def rpc_endpoints(self, network: str) -> tuple[Endpoint, ...]:
        """The endpoints the proxy may forward HTTP JSON-RPC calls of ``network`` to."""
        return tuple(e for e in self.endpoints if e.network == network and e.kind == "node-rpc")

    def endpoint_by_id(self, endpoint_id_: str) -> Endpoint | None:
        return next((e for e in self.endpoints if e.id == endpoint_id_), None)


# --- small typed readers; each raises ConfigError naming the full key ---------------------


def _mapping(value: Any, key: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"must be a mapping, got {type(value).__name__}")
    return value


def _check_keys(section: Mapping[str, Any], allowed: tuple[str, ...], prefix: str) -> None:
    for k in section:
        if k not in allowed:
            where = f"{prefix}.{k}" if prefix else str(k)
            raise ConfigError(where, f"unknown key (known: {', '.join(allowed)})")


def _int(section: Mapping[str, Any], name: str, default: int, key: str, *, minimum: int) -> int:
    value = section.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(key, f"must be >= {minimum}, got {value}")
    return value


def _num(section: Mapping[str, Any], name: str, default: float, key: str) -> float:
    value = section.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(key, f"must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(key, f"must be > 0, got {value}")
    return float(value)


def _str(
    section: Mapping[str, Any], name: str, default: str | None, key: str, *, secret: bool = False
) -> str | None:
    value = section.get(name, default)
    if value is not None and not isinstance(value, str):
        shown = type(value).__name__ if secret else repr(value)  # never echo a secret
        raise ConfigError(key, f"must be a string, got {shown}")
    return value


def _bool(section: Mapping[str, Any], name: str, default: bool, key: str) -> bool:
    value = section.get(name, default)
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, got {value!r}")
    return value


def _str_list(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(key, "must be a list of strings")
    return value


def _expand_env(value: str, key: str, env: Mapping[str, str]) -> str:
    """``${VAR}`` in a URL or token is read from the environment, so secrets can
    stay out of the config file."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in env:
            raise ConfigError(key, f"environment variable {m.group(1)} is not set")
        return env[m.group(1)]

    return _ENV_REF.sub(sub, value)


def _url(value: Any, key: str, schemes: tuple[str, ...]) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(key, "must be a non-empty URL string")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as e:
        raise ConfigError(key, f"bad URL ({e})") from None
    if parts.scheme not in schemes or not parts.hostname:
        raise ConfigError(key, f"bad URL {redact_url(value)!r}: need {'/'.join(schemes)}://host")
    return value


# --- sections ------------------------------------------------------------------------------


def _parse_networks(raw: Any) -> dict[str, NetworkConfig]:
    section = _mapping(raw, "networks")
    defaults = {"finney": FINNEY_GENESIS, "test": TEST_GENESIS}
    names = list(defaults) + [n for n in section if n not in defaults]
    out: dict[str, NetworkConfig] = {}
    for name in names:
        if not isinstance(name, str) or not _NETWORK_NAME.match(name):
            raise ConfigError(f"networks.{name}", "network names are lowercase [a-z0-9_-]")
        key = f"networks.{name}"
        net = _mapping(section.get(name), key)
        _check_keys(net, ("max_lag_blocks", "genesis"), key)
        genesis = _str(net, "genesis", defaults.get(name), f"{key}.genesis")
        if genesis is not None and not re.fullmatch(r"0x[0-9a-fA-F]{64}", genesis):
            raise ConfigError(f"{key}.genesis", "must be a 0x-prefixed 32-byte hex hash")
        out[name] = NetworkConfig(
            name=name,
            max_lag_blocks=_int(net, "max_lag_blocks", 3, f"{key}.max_lag_blocks", minimum=0),
            genesis=genesis.lower() if genesis else None,
        )
    return out


def _parse_proxy(raw: Any, networks: Mapping[str, NetworkConfig]) -> ProxyConfig:
    p = _mapping(raw, "proxy")
    _check_keys(
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
            "sidecar_timeout_s",
        ),
        "proxy",
    )
    nets = tuple(_str_list(p.get("networks", ["finney", "test"]), "proxy.networks"))
    for n in nets:
        if n not in networks:
            raise ConfigError(
                "proxy.networks", f"unknown network {n!r} (known: {', '.join(networks)})"
            )
    if not nets:
        raise ConfigError("proxy.networks", "must name at least one network")

    allow = (
        frozenset(_str_list(p["allowlist"], "proxy.allowlist"))
        if "allowlist" in p
        else (DEFAULT_ALLOWLIST)
    )
    allow |= frozenset(_str_list(p.get("allowlist_extra", []), "proxy.allowlist_extra"))

    rl = _mapping(p.get("rate_limit"), "proxy.rate_limit")
    _check_keys(rl, ("requests", "window_s", "max_clients", "ipv6_prefix"), "proxy.rate_limit")
    ipv6_prefix = _int(rl, "ipv6_prefix", 128, "proxy.rate_limit.ipv6_prefix", minimum=16)
    if ipv6_prefix > 128:
        raise ConfigError("proxy.rate_limit.ipv6_prefix", f"must be <= 128, got {ipv6_prefix}")
    rate_limit = RateLimitConfig(
        requests=_int(rl, "requests", 100, "proxy.rate_limit.requests", minimum=1),
        window_s=_num(rl, "window_s", 60.0, "proxy.rate_limit.window_s"),
        max_clients=_int(rl, "max_clients", 100_000, "proxy.rate_limit.max_clients", minimum=1),
        ipv6_prefix=ipv6_prefix,
    )

    trusted = []
    for i, item in enumerate(_str_list(p.get("trusted_proxies", []), "proxy.trusted_proxies")):
        try:
            trusted.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(
                f"proxy.trusted_proxies[{i}]", f"not an IP address or CIDR: {item!r}"
            ) from None

    fo = _mapping(p.get("failover"), "proxy.failover")
    _check_keys(
        fo,
        ("max_attempts", "attempt_timeout_s", "deadline_s", "eject_after", "eject_cooldown_s"),
        "proxy.failover",
    )
    failover = FailoverConfig(
        max_attempts=_int(fo, "max_attempts", 3, "proxy.failover.max_attempts", minimum=1),
        attempt_timeout_s=_num(fo, "attempt_timeout_s", 5.0, "proxy.failover.attempt_timeout_s"),
        deadline_s=_num(fo, "deadline_s", 15.0, "proxy.failover.deadline_s"),
        eject_after=_int(fo, "eject_after", 3, "proxy.failover.eject_after", minimum=1),
        eject_cooldown_s=_num(fo, "eject_cooldown_s", 30.0, "proxy.failover.eject_cooldown_s"),
    )

    c = _mapping(p.get("cache"), "proxy.cache")
    _check_keys(c, ("size_limit_mb", "enabled", "methods"), "proxy.cache")
    methods = _mapping(c.get("methods"), "proxy.cache.methods")
    for m in methods:
        if not isinstance(m, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{1,63}", m):
            raise ConfigError("proxy.cache.methods", f"bad method name {m!r}")
        _int(methods, m, 0, f"proxy.cache.methods.{m}", minimum=0)
    cache = CacheConfig(
        size_limit_mb=_int(c, "size_limit_mb", 512, "proxy.cache.size_limit_mb", minimum=1),
        enabled=_bool(c, "enabled", True, "proxy.cache.enabled"),
        methods=dict(methods),
    )

    u = _mapping(p.get("usage"), "proxy.usage")
    _check_keys(u, ("flush_s", "spool_max_batches"), "proxy.usage")
    usage = UsageConfig(
        flush_s=_num(u, "flush_s", 2.0, "proxy.usage.flush_s"),
        spool_max_batches=_int(
            u, "spool_max_batches", 10_000, "proxy.usage.spool_max_batches", minimum=1
        ),
    )

    return ProxyConfig(
        networks=nets,
        allowlist=allow,
        rate_limit=rate_limit,
        trusted_proxies=tuple(trusted),
        failover=failover,
        cache=cache,
        usage=usage,
        max_body_bytes=_int(p, "max_body_bytes", 1_048_576, "proxy.max_body_bytes", minimum=64),
        max_batch=_int(p, "max_batch", 100, "proxy.max_batch", minimum=1),
        max_response_bytes=_int(
            p, "max_response_bytes", 64 * 1_048_576, "proxy.max_response_bytes", minimum=1024
        ),
        sidecar_timeout_s=_num(p, "sidecar_timeout_s", 10.0, "proxy.sidecar_timeout_s"),
    )


def _parse_sidecar(raw: Any, env: Mapping[str, str]) -> SidecarConfig:
    s = _mapping(raw, "sidecar")
    _check_keys(s, ("host", "port", "url", "token"), "sidecar")
    host = _str(s, "host", "127.0.0.1", "sidecar.host") or "127.0.0.1"
    port = _int(s, "port", 8081, "sidecar.port", minimum=0)
    if port > 65535:
        raise ConfigError("sidecar.port", f"must be <= 65535, got {port}")
    url = _url(s.get("url", f"http://127.0.0.1:{port}"), "sidecar.url", ("http", "https"))
    token = _str(s, "token", None, "sidecar.token", secret=True)
    if token is not None:
        token = _expand_env(token, "sidecar.token", env)
        if not token:
            raise ConfigError("sidecar.token", "must not be empty (use null for no token)")
    return SidecarConfig(host=host, port=port, url=url.rstrip("/"), token=token)


def _parse_probe(raw: Any) -> ProbeConfig:
    pr = _mapping(raw, "probe")
    _check_keys(
        pr,
        ("interval_s", "head_interval_s", "timeout_s", "fail_threshold", "recover_threshold"),
        "probe",
    )
    return ProbeConfig(
        interval_s=_num(pr, "interval_s", 60.0, "probe.interval_s"),
        head_interval_s=_num(pr, "head_interval_s", 6.0, "probe.head_interval_s"),
        timeout_s=_num(pr, "timeout_s", 10.0, "probe.timeout_s"),
        fail_threshold=_int(pr, "fail_threshold", 2, "probe.fail_threshold", minimum=1),
        recover_threshold=_int(pr, "recover_threshold", 2, "probe.recover_threshold", minimum=1),
    )


def _parse_endpoints(
    raw: Any, networks: Mapping[str, NetworkConfig], env: Mapping[str, str]
) -> tuple[Endpoint, ...]:
    reg = _mapping(raw, "registry")
    _check_keys(reg, ("endpoints",), "registry")
    items = reg.get("endpoints", [])
    if not isinstance(items, list):
        raise ConfigError("registry.endpoints", "must be a list")
    seen: dict[str, int] = {}
    out = []
    fields = ("url", "provider", "kind", "network", "subnet", "archive", "region", "notes")
    for i, item in enumerate(items):
        key = f"registry.endpoints[{i}]"
        e = _mapping(item, key)
        _check_keys(e, fields, key)
        for required in ("url", "provider", "kind", "network"):
            if required not in e:
                raise ConfigError(f"{key}.{required}", "is required")
        kind = _str(e, "kind", None, f"{key}.kind")
        if kind not in KINDS:
            raise ConfigError(f"{key}.kind", f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
        network = _str(e, "network", None, f"{key}.network")
        if network not in networks:
            raise ConfigError(
                f"{key}.network", f"unknown network {network!r} (known: {', '.join(networks)})"
            )
        raw_url = e["url"]
        if isinstance(raw_url, str):
            raw_url = _expand_env(raw_url, f"{key}.url", env)
        url = _url(raw_url, f"{key}.url", _KIND_SCHEMES[kind])
        provider = _str(e, "provider", None, f"{key}.provider")
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
                subnet=_int(e, "subnet", 0, f"{key}.subnet", minimum=0),
                archive=_bool(e, "archive", False, f"{key}.archive"),
                region=_str(e, "region", "", f"{key}.region") or "",
                notes=_str(e, "notes", "", f"{key}.notes") or "",
                id=eid,
                safe_url=redact_url(url),
            )
        )
    return tuple(out)


def parse_config(raw: Any, env: Mapping[str, str] | None = None) -> Config:
    """Build a validated ``Config`` from a parsed YAML document (pure)."""
    env = os.environ if env is None else env
    top = _mapping(raw, "(top level)")
    _check_keys(top, ("proxy", "sidecar", "data_dir", "probe", "networks", "registry"), "")
    networks = _parse_networks(top.get("networks"))
    data_dir = _str(top, "data_dir", "./data", "data_dir")
    if not data_dir:
        raise ConfigError("data_dir", "must be a non-empty path")
    return Config(
        proxy=_parse_proxy(top.get("proxy"), networks),
        sidecar=_parse_sidecar(top.get("sidecar"), env),
        data_dir=Path(data_dir),
        probe=_parse_probe(top.get("probe")),
        networks=networks,
        endpoints=_parse_endpoints(top.get("registry"), networks, env),
    )


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read and validate a YAML config file; every failure is a ``ConfigError``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError("chainproxy_config", f"cannot read {str(path)!r}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            "chainproxy_config", f"{str(path)!r} is not UTF-8 text (byte {e.start})"
        ) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError("(file)", f"{path} is not valid YAML{where}") from None
    return parse_config(raw, env)
