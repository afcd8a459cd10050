"""``deploy/``: the Grafana dashboard loads (Grafana 10+ schema, the data
source a variable, every query PromQL), the alert rules pass ``promtool check
rules`` and their unit tests, the systemd units pass ``systemd-analyze
verify``. The tools come from Debian (``make deploy-deps``); without them the
test is skipped and says why. The units reload with SIGHUP and give the
proxy's drain the time it needs. That every metric these files use exists is
tested against a running sidecar (``test_metrics_sidecar_process.py``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from common.config.model import ProxyConfig
from tests.sidecar.deploy_files import (
    ALERT_TESTS,
    ALERTS,
    REPO,
    UNIT_ROOT,
    UNITS,
    alert_rules,
    as_promql,
    dashboard,
    panel_queries,
    panels,
)

DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(
            f"{name} not installed (Debian package; `make deploy-deps` installs it as root)"
        )
    return path


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_the_dashboard_is_a_grafana_10_dashboard_on_a_datasource_variable() -> None:
    doc = dashboard()
    assert doc["schemaVersion"] >= 36 and doc["uid"] == "chainproxy"
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    assert variables["network"]["datasource"] == DATASOURCE
    nested = [p for row in doc["panels"] for p in row.get("panels", [])]
    ids = [p["id"] for p in doc["panels"] + nested]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in panels(doc):
        assert p["datasource"] == DATASOURCE, p["title"]
        assert p["targets"], p["title"]
        assert {"h", "w", "x", "y"} <= p["gridPos"].keys() and p["gridPos"]["x"] + p["gridPos"][
            "w"
        ] <= 24
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE, p["title"]
            assert "chainproxy_" in t["expr"], p["title"]
    titles = " / ".join(p["title"] for p in panels(doc)).lower()
    for wanted in (
        "outcome",
        "p95",
        "failover",
        "upstream errors",
        "probe",
        "cache hit",
        "subscriptions",
    ):
        assert wanted in titles


def test_every_dashboard_query_is_promql(tmp_path: Path) -> None:
    promtool = _tool("promtool")
    # promtool parses the expressions of recording rules: one per query.
    rules = [
        {"record": f"chainproxy:panel_query_{i}", "expr": as_promql(e)}
        for i, e in enumerate(panel_queries(dashboard()))
    ]
    path = tmp_path / "panel-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    r = _run([promtool, "check", "rules", str(path)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_alert_rules_pass_promtool_and_their_unit_tests() -> None:
    promtool = _tool("promtool")
    r = _run([promtool, "check", "rules", str(ALERTS)], ALERTS.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run([promtool, "test", "rules", str(ALERT_TESTS)], ALERTS.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    names = {rule["alert"] for rule in alert_rules()}
    tested = ALERT_TESTS.read_text()
    for name in names - {"ChainproxyNoHealthyWebSocketUpstream"}:  # same rule, other kind
        assert f"alertname: {name}" in tested, f"{name} has no unit test"


def test_the_systemd_units_verify(tmp_path: Path) -> None:
    analyze = _tool("systemd-analyze")
    assert {u.name for u in UNITS} == {
        "chainproxy-proxy.service",
        "chainproxy-sidecar.service",
        "chainproxy.service",  # the launcher: the whole stack under one unit
    }
    # verify also checks that ExecStart's program exists: point the units at
    # this checkout (whose .venv has python and mitmdump) instead of /opt.
    for unit in UNITS:
        (tmp_path / unit.name).write_text(unit.read_text().replace(UNIT_ROOT, str(REPO)))
    r = _run([analyze, "verify", *(u.name for u in UNITS)], tmp_path)
    ours = [line for line in (r.stdout + r.stderr).splitlines() if "chainproxy" in line]
    assert r.returncode == 0 and ours == [], "\n".join(ours) or r.stderr


def test_the_units_run_the_documented_commands_hardened() -> None:
    by_name = {u.name: u.read_text() for u in UNITS}
    sidecar, proxy = by_name["chainproxy-sidecar.service"], by_name["chainproxy-proxy.service"]
    assert "-m sidecar --config /etc/chainproxy/chainproxy.yaml" in sidecar
    for part in (
        "-s /opt/chainproxy/addon/rpcproxy.py",
        "--mode reverse:http://127.0.0.1:8081",
        "--listen-port 8080",
        "--set chainproxy_config=/etc/chainproxy/chainproxy.yaml",
    ):
        assert part in proxy
    assert "Wants=network-online.target chainproxy-sidecar.service" in proxy
    launcher = by_name["chainproxy.service"]
    for part in (
        "/opt/chainproxy/.venv/bin/chainproxy run",
        "--config /etc/chainproxy/chainproxy.yaml",
        "--workers 4",
        "--set flow_detail=0",
    ):
        assert part in launcher
    assert "Conflicts=chainproxy-proxy.service chainproxy-sidecar.service" in launcher
    for text in (sidecar, proxy, launcher):
        for option in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
                       "EnvironmentFile=-/etc/chainproxy/chainproxy.env",
                       "StateDirectory=chainproxy", "CapabilityBoundingSet=\n"):  # fmt: skip
            assert option in text


def _directive(text: str, name: str) -> str:
    found = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{name}=")]
    assert len(found) == 1, (name, found)
    return found[0]


def _seconds(value: str) -> float:
    assert value.endswith("s") and value[:-1].isdigit(), value  # the units write plain seconds
    return float(value[:-1])


def test_the_units_reload_in_place_and_stop_after_the_drain() -> None:
    by_name = {u.name: u.read_text() for u in UNITS}
    drain_s = ProxyConfig().drain_s
    for name, text in by_name.items():
        # systemctl reload: SIGHUP to the one process, which re-reads the config
        assert _directive(text, "ExecReload") == "/bin/kill -HUP $MAINPID", name
        # SIGTERM to the main process alone; SIGKILL only to what is left at the end
        assert _directive(text, "KillMode") == "mixed", name
    # systemd waits for the drain (calls in flight, WebSocket 1001) before it kills
    for name in ("chainproxy-proxy.service", "chainproxy.service"):
        assert _seconds(_directive(by_name[name], "TimeoutStopSec")) >= drain_s + 5, name
