"""Config parsing (DESIGN.md section 7) and endpoint ids (section 6).

A config error must stop start-up with ONE line naming the key; defaults must
match the documented contract; endpoint ids must be stable and secret-free.
"""

from __future__ import annotations

import copy
import ipaddress
import re
from pathlib import Path
from typing import Any

import pytest

from common.allowlist_default import DEFAULT_ALLOWLIST
from common.config import (
    FINNEY_GENESIS,
    TEST_GENESIS,
    Config,
    ConfigError,
    load_config,
    parse_config,
)
from common.endpoint_id import endpoint_id, redact_url

REPO = Path(__file__).resolve().parents[2]
ID_RE = re.compile(r"^endpoint-srf-[0-9a-f]{16}$")


def ep(**over: Any) -> dict[str, Any]:
    base = {
        "url": "https://entrypoint-finney.opentensor.ai",
        "provider": "opentensor",
        "kind": "node-rpc",
        "network": "finney",
        "subnet": 0,
    }
    base.update(over)
    return base


def with_endpoints(*endpoints: dict[str, Any]) -> dict[str, Any]:
    return {"registry": {"endpoints": list(endpoints)}}


def assert_one_line_error(raw: Any, key: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, env if env is not None else {})
    message = str(info.value)
    assert "\n" not in message and "\r" not in message, message
    assert key in message, message
    assert info.value.key == key
    return message


# --- defaults and shipped configs ----------------------------------------------------------


def test_empty_config_takes_the_documented_defaults() -> None:
    for raw in ({}, None):
        cfg = parse_config(raw, {})
        p = cfg.proxy
        assert p.networks == ("finney", "test")
        assert p.allowlist == DEFAULT_ALLOWLIST
        assert (p.rate_limit.requests, p.rate_limit.window_s) == (100, 60)
        assert p.rate_limit.policy == "100;w=60"
        assert p.trusted_proxies == ()
        f = p.failover
        assert (f.max_attempts, f.attempt_timeout_s, f.deadline_s) == (3, 5, 15)
        assert (f.eject_after, f.eject_cooldown_s) == (3, 30)
        assert p.cache.size_limit_mb == 512
        assert p.max_body_bytes == 1_048_576
        assert p.max_batch == 100
        s = cfg.sidecar
        assert (s.host, s.port, s.url, s.token) == (
            "127.0.0.1",
            8081,
            "http://127.0.0.1:8081",
            None,
        )
        assert cfg.data_dir == Path("./data")
        pr = cfg.probe
        assert (pr.interval_s, pr.head_interval_s, pr.timeout_s) == (60, 6, 10)
        assert (pr.fail_threshold, pr.recover_threshold) == (2, 2)
        assert set(cfg.networks) == {"finney", "test"}
        assert cfg.networks["finney"].max_lag_blocks == 3
        assert cfg.networks["test"].max_lag_blocks == 3
        assert cfg.networks["finney"].genesis == FINNEY_GENESIS
        assert cfg.networks["test"].genesis == TEST_GENESIS
        assert FINNEY_GENESIS.startswith("0x2f0555cc76fc2840")
        assert TEST_GENESIS.startswith("0x8f9cf856bf558a14")


def test_default_allowlist_is_read_only() -> None:
    for method in ("chain_getHeader", "chain_getBlockHash", "chain_getBlock", "state_call"):
        assert method in DEFAULT_ALLOWLIST
    for method in ("author_submitExtrinsic", "chain_subscribeNewHeads", "system_addReservedPeer"):
        assert method not in DEFAULT_ALLOWLIST


def test_sidecar_url_follows_the_configured_port() -> None:
    cfg = parse_config({"sidecar": {"port": 9000}}, {})
    assert cfg.sidecar.url == "http://127.0.0.1:9000"


def test_explicit_values_override_defaults() -> None:
    raw = {
        "proxy": {
            "networks": ["test"],
            "allowlist": ["chain_getHeader"],
            "rate_limit": {"requests": 5, "window_s": 1},
            "trusted_proxies": ["10.0.0.0/8", "192.168.1.7"],
            "failover": {"max_attempts": 2, "attempt_timeout_s": 0.5, "deadline_s": 2},
            "max_batch": 7,
        },
        "sidecar": {"token": "${CP_TOKEN}"},
        "data_dir": "/var/lib/cp",
    }
    cfg = parse_config(raw, {"CP_TOKEN": "s3cr3t"})
    assert cfg.proxy.networks == ("test",)
    assert cfg.proxy.allowlist == frozenset({"chain_getHeader"})
    assert cfg.proxy.rate_limit.policy == "5;w=1"
    assert ipaddress.ip_address("10.2.3.4") in cfg.proxy.trusted_proxies[0]
    assert ipaddress.ip_address("192.168.1.7") in cfg.proxy.trusted_proxies[1]
    assert cfg.proxy.failover.max_attempts == 2
    assert cfg.proxy.failover.attempt_timeout_s == 0.5
    assert cfg.proxy.max_batch == 7
    assert cfg.sidecar.token == "s3cr3t"
    assert cfg.data_dir == Path("/var/lib/cp")


@pytest.mark.parametrize("name", ["finney.yaml", "demo.yaml"])
def test_shipped_configs_load(name: str) -> None:
    cfg = load_config(REPO / "configs" / name, env={})
    assert isinstance(cfg, Config)
    assert cfg.endpoints, "a shipped config must list endpoints"
    assert set(cfg.proxy.networks) <= set(cfg.networks)
    for net in cfg.proxy.networks:
        assert cfg.rpc_endpoints(net), f"{name}: no node-rpc endpoint for {net}"
    ids = [e.id for e in cfg.endpoints]
    assert len(set(ids)) == len(ids)
    assert all(ID_RE.match(i) for i in ids)
    assert any(e.archive for e in cfg.rpc_endpoints("finney"))
    for e in cfg.endpoints:
        assert cfg.endpoint_by_id(e.id) is e


def test_finney_yaml_lists_the_documented_public_endpoints() -> None:
    cfg = load_config(REPO / "configs" / "finney.yaml", env={})
    urls = {e.url for e in cfg.endpoints}
    assert "https://entrypoint-finney.opentensor.ai" in urls
    assert "wss://entrypoint-finney.opentensor.ai:443" in urls
    archive = [e for e in cfg.endpoints if e.url == "https://archive.chain.opentensor.ai"]
    assert archive and archive[0].archive and archive[0].kind == "node-rpc"


# --- one test per class of config error ----------------------------------------------------


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


# --- files -------------------------------------------------------------------------------


def test_unreadable_file_missing(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(missing, env={})
    message = str(info.value)
    assert "\n" not in message
    assert str(missing) in message


def test_unreadable_file_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    assert "\n" not in str(info.value)
    assert str(tmp_path) in str(info.value)


def test_unreadable_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("# caf\u00e9 config\ndata_dir: ./data\n".encode("latin-1"))
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "proxy: [unclosed\n",
        "proxy:\n  rate_limit: {requests: 100\n",
        "proxy:\n\tmax_batch: 5\n",
        "a: b: c\n",
        "key: !!python/object:os.system echo\n",
    ],
)
def test_invalid_yaml(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message and "YAML" in message


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing here\n", encoding="utf-8")
    cfg = load_config(path, env={})
    assert cfg.proxy.max_batch == 100 and cfg.sidecar.port == 8081


def test_file_errors_name_the_nested_key(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("proxy:\n  rate_limt: {requests: 5}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"proxy\.rate_limt"):
        load_config(path, env={})


# --- endpoint ids --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://entrypoint-finney.opentensor.ai",
        "wss://entrypoint-finney.opentensor.ai:443",
        "http://127.0.0.1:9944",
        "http://[::1]:9944/rpc",
    ],
)
def test_endpoint_id_format(url: str) -> None:
    assert ID_RE.match(endpoint_id(url))
    assert endpoint_id(url) == endpoint_id(url)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("https://entrypoint-finney.opentensor.ai", "https://entrypoint-finney.opentensor.ai/"),
        ("https://entrypoint-finney.opentensor.ai", "https://ENTRYPOINT-finney.opentensor.AI"),
        ("https://entrypoint-finney.opentensor.ai", "HTTPS://entrypoint-finney.opentensor.ai:443"),
        ("wss://lite.chain.opentensor.ai:443", "wss://lite.chain.opentensor.ai"),
        ("http://node.example:80/rpc/", "http://node.example/rpc"),
    ],
)
def test_two_spellings_of_one_url_have_one_id(a: str, b: str) -> None:
    assert endpoint_id(a) == endpoint_id(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("https://entrypoint-finney.opentensor.ai", "https://lite.chain.opentensor.ai"),
        ("https://entrypoint-finney.opentensor.ai", "wss://entrypoint-finney.opentensor.ai"),
        ("http://127.0.0.1:9944", "http://127.0.0.1:9945"),
        (
            "https://bittensor-finney.api.onfinality.io/public",
            "https://bittensor-finney.api.onfinality.io/public-ws",
        ),
    ],
)
def test_different_endpoints_have_different_ids(a: str, b: str) -> None:
    assert endpoint_id(a) != endpoint_id(b)


SECRET = "9f3c2a7be41d4c0f8a6b5e2d1c3b4a59"


@pytest.mark.parametrize(
    ("with_key", "other_key", "bare_host"),
    [
        (
            f"https://bittensor-finney.api.onfinality.io/rpc?apikey={SECRET}",
            "https://bittensor-finney.api.onfinality.io/rpc?apikey=abcdefabcdef0123456789aa",
            "bittensor-finney.api.onfinality.io",
        ),
        (
            f"https://rpc.example.net/rpc?api_key={SECRET}&chain=finney",
            "https://rpc.example.net/rpc?api_key=other0other0other0other0&chain=finney",
            "rpc.example.net",
        ),
        (
            f"https://api-bittensor.dwellir.com/{SECRET}",
            "https://api-bittensor.dwellir.com/0aa1bb2cc3dd4ee5ff60718293a4b5c6",
            "api-bittensor.dwellir.com",
        ),
        (
            "https://api-bittensor.example.com/v1/4f1c8e2a-7b3d-4e5f-9a6b-1c2d3e4f5a6b",
            "https://api-bittensor.example.com/v1/0aaa1bbb-2ccc-4ddd-8eee-ffff00001111",
            "api-bittensor.example.com",
        ),
        (
            f"https://user:{SECRET}@node.example.org/rpc",
            "https://user:differentpassword99@node.example.org/rpc",
            "node.example.org",
        ),
        (
            f"wss://{SECRET}@node.example.org:443/ws",
            "wss://node.example.org/ws",
            "node.example.org",
        ),
    ],
)
def test_secret_is_removed_before_hashing_and_never_shown(
    with_key: str, other_key: str, bare_host: str
) -> None:
    assert endpoint_id(with_key) == endpoint_id(other_key)
    safe = redact_url(with_key)
    assert bare_host in safe
    assert SECRET not in safe
    assert "4f1c8e2a-7b3d-4e5f-9a6b-1c2d3e4f5a6b" not in safe
    assert "@" not in safe and "differentpassword99" not in redact_url(other_key)


def test_config_endpoint_safe_url_and_id_hide_the_key() -> None:
    url = f"https://bittensor-finney.api.onfinality.io/rpc?apikey={SECRET}"
    cfg = parse_config(with_endpoints(ep(url=url, provider="onfinality")), {})
    (e,) = cfg.endpoints
    assert e.url == url  # the full URL stays available to forward to
    assert SECRET not in e.safe_url and SECRET not in e.id
    assert e.safe_url.startswith("https://bittensor-finney.api.onfinality.io/rpc")
    assert e.id == endpoint_id("https://bittensor-finney.api.onfinality.io/rpc?apikey=X1")
    assert ID_RE.match(e.id)


def test_same_host_two_api_keys_is_a_duplicate() -> None:
    raw = with_endpoints(
        ep(url=f"https://a.example/rpc?apikey={SECRET}"),
        ep(url="https://a.example/rpc?apikey=another-key-0123456789"),
    )
    assert_one_line_error(raw, "registry.endpoints[1].url")


def test_bare_query_key_that_looks_like_a_secret_is_redacted() -> None:
    from common.endpoint_id import endpoint_id, redact_url

    url = "https://rpc.example.com/ws?0123abcd4567ef89aa11bb22cc33dd44"
    assert "0123abcd4567ef89" not in redact_url(url)
    assert endpoint_id(url) == endpoint_id(
        "https://rpc.example.com/ws?ffffffffffffffffffffffffffffffff"
    )
