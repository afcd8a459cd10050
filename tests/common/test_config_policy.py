"""``proxy.rate_limit.costs``, ``proxy.tiers`` and the socket caps: parsed,
defaulted, and every mistake named by its key (common/config/policy.py)."""

from __future__ import annotations

from typing import Any

import pytest

from common.config import parse_config
from common.config.errors import ConfigError

KEY = "partner-key-0123456789abcdef"


def proxy(**p: Any) -> Any:
    return parse_config({"proxy": p}, env={"PARTNER_KEY": KEY}).proxy


def test_defaults_keep_the_old_quota_and_price_heavy_reads() -> None:
    p = proxy()
    assert p.rate_limit.requests == 100 and p.rate_limit.policy == "100;w=60"
    c = p.rate_limit.costs
    assert c.enabled and c.keys_per_unit == 100 and c.storage_keys_per_unit == 10
    assert c.free_bytes == c.bytes_per_unit == 65_536
    assert p.tiers == ()
    assert p.websocket.max_connections_per_client == 32


def test_costs_and_tiers_are_read() -> None:
    p = proxy(
        rate_limit={
            "requests": 200,
            "costs": {
                "methods": {"state_getKeysPaged": 5},
                "runtime_apis": {"SubnetInfoRuntimeApi_get_all_metagraphs": 20},
            },
        },
        tiers=[
            {"name": "validators", "cidrs": ["10.0.0.0/8"], "rate_limit": {"requests": 5000}},
            {"name": "partners", "keys": ["${PARTNER_KEY}"], "max_connections_per_client": 128},
        ],
        websocket={"max_connections_per_client": 8, "max_subscriptions_per_client": 64},
    )
    assert p.rate_limit.costs.runtime_apis == {"SubnetInfoRuntimeApi_get_all_metagraphs": 20}
    validators, partners = p.tiers
    assert validators.rate_limit.requests == 5000
    # a tier without costs of its own prices calls like the default quota
    assert validators.rate_limit.costs == p.rate_limit.costs
    assert partners.keys == (KEY,) and partners.rate_limit == p.rate_limit
    assert partners.max_connections_per_client == 128
    assert KEY not in repr(p)  # keys never printed with the config
    assert p.websocket.max_connections_per_client == 8


@pytest.mark.parametrize(
    ("p", "key", "words"),
    [
        ({"rate_limit": {"costs": {"bogus": 1}}}, "proxy.rate_limit.costs", "bogus"),
        (
            {"rate_limit": {"costs": {"methods": {"x y": 1}}}},
            "proxy.rate_limit.costs.methods",
            "bad name",
        ),
        ({"rate_limit": {"costs": {"runtime_apis": {"A_b": -1}}}}, "runtime_apis.A_b", ">= 0"),
        ({"rate_limit": {"window_s": 0}}, "proxy.rate_limit.window_s", "> 0"),
        ({"tiers": {"name": "x"}}, "proxy.tiers", "list"),
        ({"tiers": [{"name": "x"}]}, "proxy.tiers[0]", "cidrs or keys"),
        ({"tiers": [{"name": "x", "keys": ["short"]}]}, "proxy.tiers[0].keys[0]", "too short"),
        ({"tiers": [{"name": "x", "cidrs": ["nope"]}]}, "proxy.tiers[0].cidrs[0]", "CIDR"),
        ({"tiers": [{"name": "x", "keys": ["${MISSING}"]}]}, "proxy.tiers[0].keys[0]", "MISSING"),
        (
            {"tiers": [{"name": "a", "cidrs": ["10.0.0.0/8"]}, {"name": "a", "cidrs": ["::1"]}]},
            "proxy.tiers[1].name",
            "twice",
        ),
        (
            {"tiers": [{"name": "a", "keys": [KEY]}, {"name": "b", "keys": [KEY]}]},
            "proxy.tiers[1].keys[0]",
            "twice",
        ),
        ({"websocket": {"max_connections_per_client": 0}}, "max_connections_per_client", ">= 1"),
    ],
)
def test_mistakes_name_their_key(p: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        proxy(**p)
    text = str(e.value)
    assert key in text and words in text
    assert KEY not in text  # a secret is never echoed in an error
