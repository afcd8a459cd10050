"""Command-line overrides of a loaded config (``--set chainproxy_redis_url=…``,
``--set chainproxy_trusted_proxies=…``, ``--set chainproxy_processes=N``): what
the launcher of ``--workers N`` adds to an operator's file without rewriting
it. Same errors as the file's."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from common.config.model import Config, RedisConfig
from common.config.readers import parse_trusted
from common.config.redis import parse_redis


def with_overrides(
    config: Config,
    *,
    redis_url: str = "",
    trusted: str = "",
    processes: int = 1,
    env: Mapping[str, str] | None = None,
) -> Config:
    env = os.environ if env is None else env
    if redis_url:
        base = config.redis or RedisConfig(url=redis_url)
        raw = {
            "url": redis_url,
            "key_prefix": base.key_prefix,
            "timeout_ms": base.timeout_ms,
            "cache_ttl_s": base.cache_ttl_s,
        }
        config = dataclasses.replace(config, redis=parse_redis(raw, env))
    if trusted.strip():
        extra = parse_trusted(
            [t.strip() for t in trusted.split(",") if t.strip()], "chainproxy_trusted_proxies"
        )
        proxy = config.proxy
        merged = proxy.trusted_proxies + tuple(n for n in extra if n not in proxy.trusted_proxies)
        config = dataclasses.replace(
            config, proxy=dataclasses.replace(proxy, trusted_proxies=merged)
        )
    if processes > 1 and config.redis is not None:
        # how many share it on this machine (--workers N): a node's budget is
        # split between them while Redis is away
        config = dataclasses.replace(
            config, redis=dataclasses.replace(config.redis, processes=processes)
        )
    return config
