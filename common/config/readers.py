"""Small typed readers for one value of a config section; each raises a
``ConfigError`` naming the full key, so every problem is one clear line."""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from common.config.errors import ConfigError
from common.endpoint_id import redact_url

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def mapping(value: Any, key: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"must be a mapping, got {type(value).__name__}")
    return value


def check_keys(section: Mapping[str, Any], allowed: tuple[str, ...], prefix: str) -> None:
    for k in section:
        if k not in allowed:
            where = f"{prefix}.{k}" if prefix else str(k)
            raise ConfigError(where, f"unknown key (known: {', '.join(allowed)})")


# No count, size or limit of a deployment comes near it, and every one stays
# exact in a float, a JSON number and SQLite's signed 64 bits (an integer of 24
# digits once passed check-config and then switched the edge cache off).
MAX_INT = 2**53 - 1


def get_int(
    section: Mapping[str, Any],
    name: str,
    default: int,
    key: str,
    *,
    minimum: int,
    maximum: int = MAX_INT,
) -> int:
    value = section.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(key, f"must be >= {minimum}, got {value}")
    if value > maximum:
        shown = value if value.bit_length() <= 64 else f"one of {len(str(value))} digits"
        raise ConfigError(key, f"must be <= {maximum}, got {shown}")
    return value


def get_num(
    section: Mapping[str, Any], name: str, default: float, key: str, *, zero_ok: bool = False
) -> float:
    """A finite number > 0 (``zero_ok``: >= 0, where 0 means off or never)."""
    value = section.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(key, f"must be a number, got {value!r}")
    if isinstance(value, int) and value.bit_length() > 64:  # no float holds it exactly
        raise ConfigError(key, f"must be a number below 2**64, got one of {len(str(value))} digits")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(key, f"must be {'>=' if zero_ok else '>'} 0, got {value}")
    return float(value)


def get_str(
    section: Mapping[str, Any], name: str, default: str | None, key: str, *, secret: bool = False
) -> str | None:
    value = section.get(name, default)
    if value is not None and not isinstance(value, str):
        shown = type(value).__name__ if secret else repr(value)  # never echo a secret
        raise ConfigError(key, f"must be a string, got {shown}")
    return value


def get_bool(section: Mapping[str, Any], name: str, default: bool, key: str) -> bool:
    value = section.get(name, default)
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, got {value!r}")
    return value


def str_list(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(key, "must be a list of strings")
    return value


def expand_env(value: str, key: str, env: Mapping[str, str]) -> str:
    """``${VAR}`` in a URL or token is read from the environment, so secrets can
    stay out of the config file."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in env:
            raise ConfigError(key, f"environment variable {m.group(1)} is not set")
        return env[m.group(1)]

    return _ENV_REF.sub(sub, value)


def get_url(value: Any, key: str, schemes: tuple[str, ...]) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(key, "must be a non-empty URL string")
    need = f"need {'/'.join(schemes)}://host"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:  # (its message may quote a password: not shown)
        raise ConfigError(key, f"bad URL {shown_url(value)!r}: {need}[:port]") from None
    if parts.scheme not in schemes or not parts.hostname:
        raise ConfigError(key, f"bad URL {shown_url(value)!r}: {need}")
    if "@" in parts.path or "@" in parts.query:
        # ``user:pa/ss@host`` parses as host ``user``: a password's own '/' or '@'
        # must be percent-encoded (%2F, %40)
        raise ConfigError(
            key, f"bad URL {shown_url(value)!r}: an '@' after the host (percent-encode it: %40)"
        )
    return value


def shown_url(url: str) -> str:
    """A URL as an error message or a summary may show it: nothing of what
    comes before its last '@' (a password, however malformed the URL), secret
    path segments and query values redacted; only scheme and host of one
    that cannot be parsed."""
    if "@" in url:
        scheme, sep, _ = url.partition("://")
        tail = url.rsplit("@", 1)[1]
        url = f"{scheme}://***@{tail}" if sep else f"***@{tail}"
    try:
        return redact_url(url)
    except ValueError:
        scheme, sep, rest = url.partition("://")
        host = rest.split("/", 1)[0].rsplit("@", 1)[-1].split(":", 1)[0]
        return f"{scheme}://{host}…" if sep else "…"


def parse_trusted(
    items: list[str], key: str
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """A list of addresses or CIDRs (trusted proxies, a tier's ``cidrs``)."""
    trusted = []
    for i, item in enumerate(items):
        try:
            trusted.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(f"{key}[{i}]", f"not an IP address or CIDR: {item!r}") from None
    return tuple(trusted)
