"""``proxy.upstream_limits`` and ``registry.endpoints[].max_rps`` /
``max_concurrency``: parsed, defaulted, and every mistake named by its key."""

from __future__ import annotations

from typing import Any

import pytest

from chainproxy.summary import describe
from common.config import parse_config
from common.config.errors import ConfigError


def _endpoint(**extra: Any) -> dict[str, Any]:
    return {
        "url": "https://node.example:443",
        "provider": "example",
        "kind": "node-rpc",
        "network": "finney",
        **extra,
    }


def test_defaults_respect_the_nodes_without_budgets() -> None:
    c = parse_config({"registry": {"endpoints": [_endpoint()]}})
    lim = c.proxy.upstream_limits
    assert lim.enabled and lim.adaptive and lim.max_wait_s == 1.0 and lim.max_backoff_s == 300
    e = c.endpoints[0]
    assert e.max_rps is None and e.max_concurrency is None
    assert "nodes' limits respected" in describe(c, "c.yaml")


def test_budgets_and_limits_are_read() -> None:
    c = parse_config(
        {
            "proxy": {"upstream_limits": {"max_wait_s": 0.5, "adaptive": False}},
            "registry": {"endpoints": [_endpoint(max_rps=20, max_concurrency=8)]},
        }
    )
    assert c.endpoints[0].max_rps == 20 and c.endpoints[0].max_concurrency == 8
    assert c.proxy.upstream_limits.max_wait_s == 0.5 and not c.proxy.upstream_limits.adaptive
    text = describe(c, "c.yaml")
    assert "1 endpoints with a budget" in text and "learned" not in text


def test_switched_off_says_so() -> None:
    c = parse_config({"proxy": {"upstream_limits": {"enabled": False}}})
    assert "nodes' limits off" in describe(c, "c.yaml")


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"proxy": {"upstream_limits": {"max_wait_s": 60}}}, "proxy.upstream_limits.max_wait_s"),
        ({"proxy": {"upstream_limits": {"max_wait_s": -1}}}, "proxy.upstream_limits.max_wait_s"),
        (
            {"proxy": {"upstream_limits": {"max_backoff_s": 0.5}}},
            "proxy.upstream_limits.max_backoff_s",
        ),
        ({"proxy": {"upstream_limits": {"enabled": "yes"}}}, "proxy.upstream_limits.enabled"),
        ({"proxy": {"upstream_limits": {"wait": 1}}}, "proxy.upstream_limits"),
        ({"registry": {"endpoints": [_endpoint(max_rps=0)]}}, "registry.endpoints[0].max_rps"),
        (
            {"registry": {"endpoints": [_endpoint(max_concurrency="8")]}},
            "registry.endpoints[0].max_concurrency",
        ),
    ],
)
def test_mistakes_are_named_by_their_key(raw: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(raw)
    assert key in str(e.value)


def test_zero_means_off_or_never_where_documented() -> None:
    c = parse_config(
        {"proxy": {"cross_check": {"sample_rate": 0}, "upstream_limits": {"max_wait_s": 0}}}
    )
    assert c.proxy.cross_check.sample_rate == 0 and c.proxy.upstream_limits.max_wait_s == 0
    with pytest.raises(ConfigError, match="sample_rate"):
        parse_config({"proxy": {"cross_check": {"sample_rate": -0.1}}})
