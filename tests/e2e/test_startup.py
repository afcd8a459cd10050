"""Start-up: a bad or missing config stops mitmdump and the sidecar with one
clear line naming the key; nothing starts half-configured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.harness import BIN, REPO, free_port

pytestmark = pytest.mark.e2e

GOOD = {
    "registry": {
        "endpoints": [
            {"url": "http://127.0.0.1:9", "provider": "p", "kind": "node-rpc", "network": "finney"}
        ]
    }
}


# A fresh process, as an operator starts it; the timeout guards against a hang
# only (a start costs ~2 s of CPU; a machine running two suites side by side
# took over 30 s of wall time for one)
START_TIMEOUT_S = 90


def _mitmdump(
    config: str | None, timeout: float = START_TIMEOUT_S, sets: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    argv = [
        str(BIN / "mitmdump"),
        "-s",
        str(REPO / "addon" / "rpcproxy.py"),
        "--mode",
        "reverse:http://127.0.0.1:9",
        "--listen-host",
        "127.0.0.1",
        "--listen-port",
        str(free_port()),
    ]
    if config is not None:
        argv += ["--set", f"chainproxy_config={config}"]
    for option in sets:
        argv += ["--set", option]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def _sidecar(config: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", "--config", config],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        cwd=REPO,
    )


def _write(tmp_path: Path, doc: object) -> str:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


BAD = [
    ({"proxy": {"rate_limt": {}}}, "proxy.rate_limt"),
    ({"proxy": {"max_batch": -1}}, "proxy.max_batch"),
    (
        {
            "registry": {
                "endpoints": [
                    {"url": "ftp://x", "provider": "p", "kind": "node-rpc", "network": "finney"}
                ]
            }
        },
        "registry.endpoints[0].url",
    ),
    (
        {
            "registry": {
                "endpoints": [
                    {"url": "http://x", "provider": "p", "kind": "node-rpc", "network": "mars"}
                ]
            }
        },
        "registry.endpoints[0].network",
    ),
]


@pytest.mark.parametrize(("doc", "key"), BAD, ids=[k for _, k in BAD])
def test_bad_config_stops_mitmdump_with_one_line_naming_the_key(
    tmp_path: Path, doc: object, key: str
) -> None:
    r = _mitmdump(_write(tmp_path, doc))
    assert r.returncode == 2  # as the sidecar's: the units do not restart it
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if f"config error: {key}:" in ln]
    assert len(lines) == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_missing_config_option_stops_mitmdump(tmp_path: Path) -> None:
    r = _mitmdump(None)
    assert r.returncode == 2
    assert "chainproxy_config: not set" in r.stdout + r.stderr


def test_an_option_given_twice_stops_mitmdump_naming_it(tmp_path: Path) -> None:
    """mitmproxy would apply none of chainproxy's options and say nothing: the
    proxy would start unconfigured and pass every call to the sidecar."""
    twice = ("chainproxy_http_direct=false", "chainproxy_http_direct=true")
    r = _mitmdump(_write(tmp_path, GOOD), sets=twice)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    said = "chainproxy: an option given more than once (chainproxy_http_direct = false, true)"
    assert said in out and "Traceback" not in out


def test_unreadable_config_file_stops_mitmdump(tmp_path: Path) -> None:
    r = _mitmdump(str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "cannot read" in r.stdout + r.stderr


@pytest.mark.parametrize(("doc", "key"), BAD, ids=[k for _, k in BAD])
def test_bad_config_stops_the_sidecar(tmp_path: Path, doc: object, key: str) -> None:
    r = _sidecar(_write(tmp_path, doc))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"sidecar: {r.stderr.strip()[9:]}"]
    assert f"config error: {key}:" in r.stderr


def test_good_config_is_accepted_by_the_sidecar_parser(tmp_path: Path) -> None:
    # Guard against the BAD cases failing for an unrelated reason.
    from common.config import load_config

    assert load_config(_write(tmp_path, GOOD)).endpoints[0].provider == "p"
