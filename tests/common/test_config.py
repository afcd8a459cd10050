"""Config parsing: defaults must match the documented
contract, the shipped configs load, and reading a file fails with one line.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

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
from tests.common.helpers import ID_RE, REPO

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
        "proxy: {}\nproxy: {networks: [test]}\n",  # a key given twice: once last-wins
        "proxy:\n  max_batch: 5\n  max_batch: 6\n",
        "? [a, b]\n: 1\n",
        "a: " + "[" * 5000 + "]" * 5000 + "\n",  # deeper than the parser's stack
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
