"""Deployment configuration: one YAML file, read by both the addon and the sidecar.

``parse_config(dict)`` is pure and turns the first problem it finds into a
``ConfigError`` whose one-line message names the key, so start-up stops with a
clear line instead of running half-configured.

The package: ``model`` (the dataclasses), ``readers`` (typed readers of one
value), ``proxy`` and ``sections`` (one parser per section), ``loader``
(``parse_config``, ``load_config``). Import from here.
"""

from common.config.errors import ConfigError
from common.config.loader import load_config, parse_config
from common.config.model import (
    FINNEY_GENESIS,
    KINDS,
    TEST_GENESIS,
    CacheConfig,
    Config,
    Endpoint,
    FailoverConfig,
    NetworkConfig,
    ProbeConfig,
    ProxyConfig,
    RateLimitConfig,
    RedisConfig,
    SidecarConfig,
    UsageConfig,
)
from common.config.overrides import with_overrides

__all__ = [
    "FINNEY_GENESIS",
    "KINDS",
    "TEST_GENESIS",
    "CacheConfig",
    "Config",
    "ConfigError",
    "Endpoint",
    "FailoverConfig",
    "NetworkConfig",
    "ProbeConfig",
    "ProxyConfig",
    "RateLimitConfig",
    "RedisConfig",
    "SidecarConfig",
    "UsageConfig",
    "load_config",
    "parse_config",
    "with_overrides",
]
