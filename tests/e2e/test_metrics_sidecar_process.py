"""The sidecar as a process (``python -m sidecar``) probing a simulated node,
fed usage batches by real HTTP POSTs the way a proxy sends them: ``/metrics``
then carries the contract metrics with the reported values, counted once,
and every metric name the Grafana dashboard and the alert rules use."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from chainproxy.supervisor import free_port
from common.config import parse_config
from simnode.command import simnode_argv
from tests.sidecar.deploy_files import REPO, deploy_metric_names
from tests.sidecar.metrics_batch import batch_with_metrics, metrics_section

pytestmark = pytest.mark.e2e

FINNEY_GENESIS = "0x2f0555cc76fc2840a25a6ea3b9637146806f1f44b090c175ffde2a7e5ab36c03"


def http(url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def wait_until(check: Any, what: str, timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if result := check():
                return result
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def stop(proc: subprocess.Popen[Any]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def sidecar_stack(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A simulated finney node, a dead endpoint and a sidecar probing both:
    (sidecar URL, [live node id, dead node id])."""
    node_port, sidecar_port = free_port(), free_port()
    node = subprocess.Popen(
        simnode_argv(
            node_port,
            name="n1",
            seed="finney",
            epoch=time.time(),
            block_time=2.0,
            start_height=5000,
            genesis=FINNEY_GENESIS,
        ),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    sidecar = None
    try:
        wait_until(lambda: http(f"http://127.0.0.1:{node_port}/_sim/state")[0] == 200, "simnode")
        raw = {
            "proxy": {"networks": ["finney"]},
            "sidecar": {"port": sidecar_port, "url": f"http://127.0.0.1:{sidecar_port}"},
            "data_dir": str(tmp_path / "data"),
            "probe": {"interval_s": 1, "head_interval_s": 0.5, "timeout_s": 1},
            "registry": {
                "endpoints": [
                    {
                        "url": f"http://127.0.0.1:{node_port}",
                        "provider": "sim",
                        "kind": "node-rpc",
                        "network": "finney",
                    },
                    {
                        "url": f"http://127.0.0.1:{free_port()}",
                        "provider": "gone",
                        "kind": "node-rpc",
                        "network": "finney",
                    },
                ]
            },
        }
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(raw))
        ids = [e.id for e in parse_config(raw, env={}).endpoints]
        sidecar = subprocess.Popen(
            [sys.executable, "-m", "sidecar", "--config", str(path)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert sidecar.stdout is not None
        assert "sidecar listening on" in sidecar.stdout.readline()
        yield f"http://127.0.0.1:{sidecar_port}", ids
    finally:
        if sidecar is not None:
            stop(sidecar)
        stop(node)


def scrape(base: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Sample name -> labels -> value."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def total(samples: dict[tuple[tuple[str, str], ...], float], **labels: str) -> float:
    return sum(v for k, v in samples.items() if labels.items() <= dict(k).items())


def test_a_fed_sidecar_exposes_every_metric_the_deploy_files_use(
    sidecar_stack: tuple[str, list[str]],
) -> None:
    base, (live, dead) = sidecar_stack

    def probed() -> bool:
        rows = http(f"{base}/api/v1/endpoints/root")[1]["rows"]
        return all(r["classification"] != "unknown" for r in rows) and any(
            r["status"] == "OK" for r in rows
        )

    wait_until(probed, "both endpoints probed, the live one OK")
    usage = f"{base}/api/v1/internal/usage"
    now = time.time()
    minute = int(now // 60)
    rollup = {"minute": minute, "network": "finney", "endpoint": live, "method": "chain_getHeader",
              "requests": 2, "errors": 0, "failovers": 1, "cache_hits": 0,
              "latency_ms_sum": 50.0, "latency_hist": {"100": 2}}  # fmt: skip
    batch = batch_with_metrics(metrics_section([live, dead]), sent_at=now, rollups=[rollup])
    assert http(usage, batch) == (200, {"accepted": True, "duplicate": False, "rollups": 1})
    assert http(usage, batch)[1]["duplicate"] is True  # a redelivery from the spool
    heartbeat = batch_with_metrics({"proxy_id": "proxy-host:4243", "gauges": {}}, sent_at=now)
    assert http(usage, heartbeat)[0] == 200

    m = scrape(base)
    missing = sorted(deploy_metric_names() - {name for name, s in m.items() if s})
    assert missing == [], f"used by deploy/ but without a sample in /metrics: {missing}"
    assert total(m["chainproxy_requests_total"], outcome="ok") == 10  # once, not twice
    assert total(m["chainproxy_upstream_attempts_total"], endpoint=dead, result="http-5xx") == 1
    assert total(m["chainproxy_proxies_reporting"]) == 2
    assert total(m["chainproxy_probe_results_total"], endpoint=live, result="live") >= 1
    assert total(m["chainproxy_probe_results_total"], endpoint=dead, result="dead") >= 1
    assert total(m["chainproxy_healthy_upstreams"], network="finney", kind="node-rpc") == 1
    assert total(m["chainproxy_endpoint_lag_blocks"], endpoint=live) == 0
    assert abs(total(m["chainproxy_stats_updated_timestamp_seconds"]) - time.time()) < 60
    status, doc = http(f"{base}/api/v1/usage")
    assert status == 200 and doc["freshness"] == "fresh" and doc["requests"] == 2
