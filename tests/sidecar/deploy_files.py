"""Reading ``deploy/`` for the tests: the Grafana dashboard's panels and
queries, the alert rules' expressions, and the metric names they use."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "chainproxy.json"
ALERTS = DEPLOY / "prometheus" / "chainproxy-alerts.yml"
ALERT_TESTS = DEPLOY / "prometheus" / "chainproxy-alerts.test.yml"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
UNIT_ROOT = "/opt/chainproxy"  # where the units expect the checkout

# Grafana's variables, replaced by values Prometheus accepts so a panel's query
# can be checked as PromQL.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$network": ".*"}

_METRIC = re.compile(r"\bchainproxy_[a-z0-9_]+")


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel but rows, including those folded into a collapsed row."""
    for p in doc["panels"]:
        if p["type"] == "row":
            yield from p.get("panels", [])
        else:
            yield p


def panel_queries(doc: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(doc) for t in p["targets"]]


def as_promql(expr: str) -> str:
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def metric_names(exprs: list[str]) -> set[str]:
    """The ``chainproxy_…`` series names the expressions read (as exposed:
    ``…_total``, ``…_bucket``)."""
    return {m for e in exprs for m in _METRIC.findall(e)}


def deploy_metric_names() -> set[str]:
    return metric_names(panel_queries(dashboard()) + [r["expr"] for r in alert_rules()])
