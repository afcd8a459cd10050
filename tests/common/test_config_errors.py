"""Config errors: each class of mistake stops start-up
with ONE line naming the key and the problem, and never shows a secret.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from common.config import parse_config
from tests.common.helpers import assert_one_line_error, ep, with_endpoints


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"proxxy": {}}, "proxxy"),
        ({"proxy": {"rate_limt": {"requests": 5}}}, "proxy.rate_limt"),
        ({"proxy": {"rate_limit": {"request": 5}}}, "proxy.rate_limit.request"),
        ({"proxy": {"failover": {"retries": 5}}}, "proxy.failover.retries"),
        ({"sidecar": {"prot": 1}}, "sidecar.prot"),
        ({"probe": {"interval": 1}}, "probe.interval"),
        ({"networks": {"finney": {"max_lag": 1}}}, "networks.finney.max_lag"),
        ({"registry": {"endpoint": []}}, "registry.endpoint"),
        (with_endpoints(ep(archvie=True)), "registry.endpoints[0].archvie"),
    ],
)
def test_unknown_key(raw: dict[str, Any], key: str) -> None:
    message = assert_one_line_error(raw, key)
    assert "unknown key" in message


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"proxy": {"max_batch": "100"}}, "proxy.max_batch"),
        ({"proxy": {"rate_limit": {"requests": "100"}}}, "proxy.rate_limit.requests"),
        ({"sidecar": {"port": "8081"}}, "sidecar.port"),
        ({"proxy": {"max_batch": True}}, "proxy.max_batch"),
        ({"proxy": {"failover": {"max_attempts": False}}}, "proxy.failover.max_attempts"),
        ({"proxy": {"failover": {"deadline_s": True}}}, "proxy.failover.deadline_s"),
        ({"proxy": {"failover": {"deadline_s": "15s"}}}, "proxy.failover.deadline_s"),
        ({"proxy": {"rate_limit": [100, 60]}}, "proxy.rate_limit"),
        ({"proxy": ["finney"]}, "proxy"),
        ({"networks": {"finney": [3]}}, "networks.finney"),
        ({"proxy": {"networks": "finney"}}, "proxy.networks"),
        ({"proxy": {"trusted_proxies": "10.0.0.1"}}, "proxy.trusted_proxies"),
        ({"proxy": {"trusted_proxies": ["not-an-ip"]}}, "proxy.trusted_proxies[0]"),
        ({"data_dir": 5}, "data_dir"),
        ({"registry": {"endpoints": {"url": "https://a.example"}}}, "registry.endpoints"),
        ({"registry": {"endpoints": ["https://a.example"]}}, "registry.endpoints[0]"),
        (with_endpoints(ep(subnet="0")), "registry.endpoints[0].subnet"),
        (with_endpoints(ep(archive="yes")), "registry.endpoints[0].archive"),
        (with_endpoints(ep(url=443)), "registry.endpoints[0].url"),
        ([{"proxy": {}}], "(top level)"),
    ],
)
def test_wrong_type(raw: Any, key: str) -> None:
    assert_one_line_error(raw, key)


@pytest.mark.parametrize(
    ("endpoint", "key"),
    [
        (ep(url="entrypoint-finney.opentensor.ai"), "registry.endpoints[1].url"),
        (ep(url="https://"), "registry.endpoints[1].url"),
        (ep(url="ftp://entrypoint-finney.opentensor.ai"), "registry.endpoints[1].url"),
        (ep(url="https://lite.chain.opentensor.ai", kind="node-wss"), "registry.endpoints[1].url"),
        (ep(url="wss://lite.chain.opentensor.ai", kind="node-rpc"), "registry.endpoints[1].url"),
        (ep(url="https://lite.chain.opentensor.ai:99999"), "registry.endpoints[1].url"),
        (ep(url="https://lite.chain.opentensor.ai:abc"), "registry.endpoints[1].url"),
        (ep(url=""), "registry.endpoints[1].url"),
    ],
)
def test_bad_url(endpoint: dict[str, Any], key: str) -> None:
    first = ep(url="https://archive.chain.opentensor.ai")
    assert_one_line_error(with_endpoints(first, endpoint), key)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"sidecar": {"url": "127.0.0.1:8081"}}, "sidecar.url"),
        ({"sidecar": {"url": "ws://127.0.0.1:8081"}}, "sidecar.url"),
        ({"sidecar": {"port": 70000}}, "sidecar.port"),
        ({"sidecar": {"port": -1}}, "sidecar.port"),
    ],
)
def test_bad_sidecar_url_or_port(raw: dict[str, Any], key: str) -> None:
    assert_one_line_error(raw, key)


def test_bad_url_error_does_not_print_the_api_key() -> None:
    bad = ep(url="https://api.example.net/rpc?apikey=TOPSECRET123", kind="node-wss")
    message = assert_one_line_error(with_endpoints(bad), "registry.endpoints[0].url")
    assert "TOPSECRET123" not in message


@pytest.mark.parametrize(
    "second",
    [
        "https://entrypoint-finney.opentensor.ai/",
        "https://Entrypoint-Finney.OPENTENSOR.ai",
        "HTTPS://entrypoint-finney.opentensor.ai",
        "https://entrypoint-finney.opentensor.ai:443",
        "https://entrypoint-finney.opentensor.ai:443/",
    ],
)
def test_duplicate_endpoint(second: str) -> None:
    raw = with_endpoints(ep(), ep(url=second, provider="other"))
    message = assert_one_line_error(raw, "registry.endpoints[1].url")
    assert "duplicate" in message and "registry.endpoints[0]" in message


def test_same_host_with_different_scheme_kind_is_not_a_duplicate() -> None:
    raw = with_endpoints(
        ep(),
        ep(url="wss://entrypoint-finney.opentensor.ai:443", kind="node-wss"),
    )
    cfg = parse_config(raw, {})
    assert len({e.id for e in cfg.endpoints}) == 2


@pytest.mark.parametrize("kind", ["node-http", "rpc", "", "NODE-RPC", None])
def test_unknown_kind(kind: Any) -> None:
    message = assert_one_line_error(with_endpoints(ep(kind=kind)), "registry.endpoints[0].kind")
    assert "node-rpc" in message  # tells the operator what is allowed


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        (with_endpoints(ep(network="mainnet")), "registry.endpoints[0].network"),
        (
            with_endpoints(ep(), ep(url="https://b.example", network="Finney")),
            "registry.endpoints[1].network",
        ),
        ({"proxy": {"networks": ["finney", "devnet"]}}, "proxy.networks"),
        ({"proxy": {"networks": []}}, "proxy.networks"),
        ({"networks": {"Main Net": {}}}, "networks.Main Net"),
    ],
)
def test_unknown_network(raw: dict[str, Any], key: str) -> None:
    assert_one_line_error(raw, key)


def test_extra_network_declared_under_networks_can_be_used() -> None:
    raw = {
        "networks": {"devnet": {"max_lag_blocks": 5}},
        "proxy": {"networks": ["devnet"]},
        **with_endpoints(ep(url="http://127.0.0.1:9944", network="devnet")),
    }
    cfg = parse_config(raw, {})
    assert cfg.proxy.networks == ("devnet",)
    assert cfg.networks["devnet"].max_lag_blocks == 5
    assert [e.network for e in cfg.rpc_endpoints("devnet")] == ["devnet"]


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"proxy": {"rate_limit": {"requests": 0}}}, "proxy.rate_limit.requests"),
        ({"proxy": {"rate_limit": {"requests": -5}}}, "proxy.rate_limit.requests"),
        ({"proxy": {"rate_limit": {"window_s": 0}}}, "proxy.rate_limit.window_s"),
        ({"proxy": {"rate_limit": {"window_s": -60}}}, "proxy.rate_limit.window_s"),
        ({"proxy": {"max_batch": 0}}, "proxy.max_batch"),
        ({"proxy": {"max_batch": -1}}, "proxy.max_batch"),
        ({"proxy": {"max_body_bytes": 0}}, "proxy.max_body_bytes"),
        ({"proxy": {"failover": {"max_attempts": 0}}}, "proxy.failover.max_attempts"),
        ({"proxy": {"failover": {"attempt_timeout_s": 0}}}, "proxy.failover.attempt_timeout_s"),
        ({"proxy": {"failover": {"attempt_timeout_s": -1.5}}}, "proxy.failover.attempt_timeout_s"),
        ({"proxy": {"failover": {"deadline_s": 0}}}, "proxy.failover.deadline_s"),
        ({"proxy": {"failover": {"deadline_s": -15}}}, "proxy.failover.deadline_s"),
        ({"proxy": {"failover": {"eject_after": 0}}}, "proxy.failover.eject_after"),
        ({"proxy": {"failover": {"eject_cooldown_s": 0}}}, "proxy.failover.eject_cooldown_s"),
        ({"proxy": {"cache": {"size_limit_mb": 0}}}, "proxy.cache.size_limit_mb"),
        ({"probe": {"interval_s": 0}}, "probe.interval_s"),
        ({"probe": {"fail_threshold": 0}}, "probe.fail_threshold"),
        ({"networks": {"finney": {"max_lag_blocks": -1}}}, "networks.finney.max_lag_blocks"),
    ],
)
def test_negative_or_zero_limit(raw: dict[str, Any], key: str) -> None:
    assert_one_line_error(raw, key)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"proxy": {"rate_limit": {"window_s": float("nan")}}}, "proxy.rate_limit.window_s"),
        ({"proxy": {"failover": {"deadline_s": float("nan")}}}, "proxy.failover.deadline_s"),
    ],
)
def test_nan_limit_is_refused(raw: dict[str, Any], key: str) -> None:
    assert_one_line_error(raw, key)


@pytest.mark.parametrize("missing", ["url", "provider", "kind", "network"])
def test_missing_required_endpoint_field(missing: str) -> None:
    item = ep()
    del item[missing]
    message = assert_one_line_error(with_endpoints(item), f"registry.endpoints[0].{missing}")
    assert "required" in message


def test_endpoint_optional_fields_default() -> None:
    cfg = parse_config(with_endpoints({k: v for k, v in ep().items() if k != "subnet"}), {})
    (e,) = cfg.endpoints
    assert (e.subnet, e.archive, e.region) == (0, False, "")


@pytest.mark.parametrize(
    ("raw", "key", "var"),
    [
        (
            with_endpoints(ep(url="https://a.example/rpc?apikey=${CP_KEY}")),
            "registry.endpoints[0].url",
            "CP_KEY",
        ),
        ({"sidecar": {"token": "${CP_TOKEN}"}}, "sidecar.token", "CP_TOKEN"),
    ],
)
def test_unset_env_reference(raw: dict[str, Any], key: str, var: str) -> None:
    message = assert_one_line_error(raw, key, env={"OTHER": "x"})
    assert var in message


def test_env_reference_is_expanded_and_kept_out_of_ids_and_safe_urls() -> None:
    raw = with_endpoints(ep(url="https://a.example/rpc?apikey=${CP_KEY}"))
    one = parse_config(copy.deepcopy(raw), {"CP_KEY": "key-number-one-1234"}).endpoints[0]
    two = parse_config(copy.deepcopy(raw), {"CP_KEY": "rotated-key-5678"}).endpoints[0]
    assert one.url == "https://a.example/rpc?apikey=key-number-one-1234"
    assert "key-number-one-1234" not in one.safe_url
    assert one.id == two.id  # rotating the key keeps the id


def test_wrong_type_token_error_does_not_print_the_secret() -> None:
    message = assert_one_line_error({"sidecar": {"token": 987654321123}}, "sidecar.token")
    assert "987654321123" not in message


@pytest.mark.parametrize(
    ("websocket", "key"),
    [
        ({"ping_interval_s": -1}, "proxy.websocket.ping_interval_s"),
        ({"ping_interval_s": "30"}, "proxy.websocket.ping_interval_s"),
        ({"ping_timeout_s": 0}, "proxy.websocket.ping_timeout_s"),
        ({"stall_s": 0}, "proxy.websocket.stall_s"),
    ],
)
def test_bad_websocket_keep_alive_and_stall(websocket: dict[str, Any], key: str) -> None:
    assert_one_line_error({"proxy": {"websocket": websocket}}, key)


def test_websocket_keep_alive_and_stall_defaults_and_off() -> None:
    ws = parse_config({}, env={}).proxy.websocket
    assert (ws.stall_s, ws.ping_interval_s, ws.ping_timeout_s) == (24.0, 30.0, 30.0)
    raw = {"proxy": {"websocket": {"ping_interval_s": 0, "ping_timeout_s": 5}}}
    ws = parse_config(raw, env={}).proxy.websocket
    assert (ws.ping_interval_s, ws.ping_timeout_s) == (0.0, 5.0)  # 0: no pings


@pytest.mark.parametrize(
    "url",
    [
        "https//alice:SuperSecretPw1@host.example",  # a scheme without its colon
        "http:/alice:SuperSecretPw1@host.example",
        "alice:SuperSecretPw1@host.example",
        "https://alice:Super/SecretPw1@host.example",  # a '/' in the password
        "https://alice:SuperSecretPw1/x@host.example",  # parses as host 'alice'
        "https://host.example:SuperSecretPw1",  # (a variable's value as the port)
    ],
)
def test_a_malformed_url_never_echoes_its_password(url: str) -> None:
    for raw in (with_endpoints(ep(url=url)), {"sidecar": {"url": url}}):
        key = "registry.endpoints[0].url" if "registry" in raw else "sidecar.url"
        message = assert_one_line_error(raw, key)
        assert "SuperSecretPw1" not in message and "Secret" not in message, message


def test_a_huge_number_is_one_line_not_a_traceback() -> None:
    huge = 10**400
    message = assert_one_line_error(
        {"proxy": {"rate_limit": {"window_s": huge}}}, "proxy.rate_limit.window_s"
    )
    assert "401 digits" in message
    assert_one_line_error({"probe": {"interval_s": -huge}}, "probe.interval_s")


def test_a_network_named_twice_is_refused() -> None:
    message = assert_one_line_error({"proxy": {"networks": ["finney", "finney"]}}, "proxy.networks")
    assert "'finney' twice" in message


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        # an integer key: it passed check-config, and the proxy then ran without
        # its edge cache (SQLite's "Python int too large")
        ({"proxy": {"cache": {"size_limit_mb": 10**23}}}, "proxy.cache.size_limit_mb"),
        ({"proxy": {"cache": {"size_limit_mb": 2**40 + 1}}}, "proxy.cache.size_limit_mb"),
        ({"proxy": {"max_batch": 10**23}}, "proxy.max_batch"),
        ({"proxy": {"max_batch": 10**400}}, "proxy.max_batch"),
    ],
)
def test_an_integer_too_large_is_refused(raw: dict[str, Any], key: str) -> None:
    message = assert_one_line_error(raw, key)
    assert "must be <=" in message, message


def test_the_largest_cache_that_fits_is_taken() -> None:
    cfg = parse_config(
        {"proxy": {"cache": {"size_limit_mb": 2**40}}, "registry": {"endpoints": []}}, env={}
    )
    assert cfg.proxy.cache.size_limit_mb == 2**40
