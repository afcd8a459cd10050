"""The ``redis:`` section (docs/OPERATIONS.md#scaling-out): the shared store of a
deployment with several proxy processes or machines. Absent: every proxy keeps
its own limiter and its machine's cache (the embedded default)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from redis.connection import parse_url

from common.config.errors import ConfigError
from common.config.model import RedisConfig
from common.config.readers import (
    check_keys,
    expand_env,
    get_int,
    get_num,
    get_str,
    get_url,
    mapping,
)
from common.endpoint_id import redact_url

_KEY_PREFIX_MAX = 64


def _check_userinfo(url: str) -> None:
    """An unencoded ``/ ? #`` in a password ends the URL's host part early: the
    parser reads the rest of the password as port, path or query, and an error
    message (or ``safe_url``) would echo it. Refused without showing any of it."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return  # get_url says why, without the URL
    if "@" not in parts.netloc and "@" in parts.path + parts.query + parts.fragment:
        raise ConfigError(
            "redis.url",
            "bad URL: percent-encode / ? # @ in the password (%2F %3F %23 %40)",
        )


def _check_options(url: str) -> None:
    """What redis-py makes of the URL's database and options, checked now (it
    would refuse them only when the proxy connects; a database that is no
    number it silently reads as 0)."""
    path = urlsplit(url).path.strip("/")
    if path and not path.isdigit():
        raise ConfigError("redis.url", f"the database must be a number, got {path[:20]!r}")
    try:
        parse_url(url)
    except ValueError as e:  # redis-py's message names the option, never the password
        raise ConfigError("redis.url", str(e)) from None


def parse_redis(raw: Any, env: Mapping[str, str]) -> RedisConfig | None:
    if raw is None:
        return None
    r = mapping(raw, "redis")
    check_keys(r, ("url", "key_prefix", "timeout_ms", "cache_ttl_s"), "redis")
    if "url" not in r:
        raise ConfigError("redis.url", "is required (or leave out the redis section)")
    raw_url = r["url"]
    if not isinstance(raw_url, str) or not raw_url:
        raise ConfigError("redis.url", "must be a non-empty URL string")
    expanded = expand_env(raw_url, "redis.url", env)
    _check_userinfo(expanded)
    url = get_url(expanded, "redis.url", ("redis", "rediss"))
    _check_options(url)
    prefix = get_str(r, "key_prefix", "chainproxy:", "redis.key_prefix")
    if not prefix or len(prefix) > _KEY_PREFIX_MAX or any(c.isspace() for c in prefix):
        raise ConfigError(
            "redis.key_prefix", f"must be 1-{_KEY_PREFIX_MAX} characters without spaces"
        )
    timeout_ms = get_num(r, "timeout_ms", 50.0, "redis.timeout_ms")
    if not 1 <= timeout_ms <= 5000:
        raise ConfigError("redis.timeout_ms", f"must be between 1 and 5000, got {timeout_ms:g}")
    ttl = get_int(r, "cache_ttl_s", 86_400, "redis.cache_ttl_s", minimum=1)
    return RedisConfig(
        url=url,
        key_prefix=prefix,
        timeout_ms=timeout_ms,
        cache_ttl_s=ttl,
        safe_url=redact_url(url),
    )
