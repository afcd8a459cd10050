"""The dashboard at ``/``: one server-rendered HTML page (Jinja2), readable
without JavaScript, refreshed by a meta tag. It calls the same document functions
as the JSON API, so the page and ``/api/v1/…`` never disagree. ``?network=``
narrows the page to one network (the registry documents see only its endpoints;
the usage figures are the API's ``?network=``); ``?page=`` is the callable
list's page. The handler (``sidecar.server.handlers.dashboard``) reads the
query into a ``PageScope`` (``scope_of``), the usage figures (``usage_of``) and
renders (``render``); no aiohttp here. (The network scope in
``sidecar.dashboard.scope``, the words in ``sidecar.dashboard.wording``, the
pictures' numbers in ``sidecar.dashboard.chart`` and
``sidecar.dashboard.pictures``, from the probe history of ``sidecar.history``.)

Pictures: each callable endpoint's latency over 24 h (sparkline) and when it
was down (incident strip); requests, errors and cache hits per hour over 7
days; each node's block-height lag over the last hour, one chart per network
in scope (so ``?network=finney`` is that network's page)."""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jinja2

from common.config import Config
from sidecar.dashboard.chart import hourly_chart
from sidecar.dashboard.pictures import incident_strip, lag_chart, sparkline
from sidecar.dashboard.scope import page_href, parse_network, scoped
from sidecar.dashboard.wording import backoff_text, capacity_text, horizon_text, updated_text
from sidecar.history.recorder import HistoryRecorder
from sidecar.history.series import lag_series, latency_series
from sidecar.probing.chain_runtime import ChainRuntimeBook
from sidecar.probing.results import NODE_KINDS
from sidecar.registry import documents
from sidecar.registry.networks import runtime_lines
from sidecar.registry.pools import HealthMap
from sidecar.registry.service import RegistryService
from sidecar.registry.upstream import UpstreamLive
from sidecar.usage.service import UsageService

log = logging.getLogger("chainproxy.sidecar.dashboard")

REFRESH_S = 30
_KIND_ORDER = ("node-rpc", "node-wss", "data-artifact", "sse")

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("sidecar.dashboard", "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclass(frozen=True, slots=True)
class Usage:
    summary: dict[str, Any] | None  # None: unavailable (or the proxy does not serve the network)
    chart: Any
    updated: str | None  # "2027-01-15 08:15:00 UTC (3 min ago)"; None: never


NO_USAGE = Usage(None, None, None)


@dataclass(frozen=True, slots=True)
class PageScope:
    """What the query asks for, checked: the network (None: all), the config
    narrowed to it, and the callable list's page; with the health and the time
    the whole page is drawn at."""

    network: str | None
    config: Config
    callable: dict[str, Any]
    health: HealthMap
    now: float


def scope_of(
    reg: RegistryService, network: str | None, page: str | None, live: UpstreamLive
) -> PageScope:
    """``?network=`` and ``?page=`` checked (``documents.PageError`` otherwise)."""
    health, now = reg.health, reg.now()
    chosen = parse_network(reg.config, network)
    config = scoped(reg.config, chosen)
    callable_ = documents.callable_endpoints(config, health, documents.parse_page(page), live=live)
    return PageScope(chosen, config, callable_, health, now)


async def usage_of(svc: UsageService | None, network: str | None) -> Usage:
    """The usage figures of the page (``NO_USAGE`` when they are unavailable)."""
    if svc is None or (network is not None and network not in svc.config.proxy.networks):
        return NO_USAGE
    try:
        summary = await svc.summary(network)
        chart = hourly_chart(await svc.hourly_series(network), svc.clock())
    except Exception as e:  # the page shows "unavailable" rather than failing whole
        log.warning("usage statistics unavailable for the dashboard: %s", e)
        return NO_USAGE
    return Usage(summary, chart, updated_text(svc.updated, svc.clock()))


def error_page(e: documents.PageError) -> str:
    """The small page of a bad query (its status is ``e.status``)."""
    return (
        f"<!doctype html><title>chainproxy</title><p>{html.escape(str(e))} — "
        '<a href="/">back to the dashboard</a></p>'
    )


def render(
    reg: RegistryService,
    scope: PageScope,
    usage: Usage,
    live: UpstreamLive,
    history: HistoryRecorder,
    book: ChainRuntimeBook | None,
    *,
    sockets: dict[str, Any] | None = None,
) -> str:
    """The page's HTML; ``sockets``: the live proxies' WebSockets, subscriptions
    and follows (``handlers/dashboard.live_sockets``)."""
    config, health, now, callable_ = scope.config, scope.health, scope.now, scope.callable
    heat = documents.heatmap(config, health)
    kinds_seen = {k for row in heat["rows"] for k in row["cells"]}
    incidents = reg.incidents.incidents()
    pictures = _pictures(history, config, [r["id"] for r in callable_["rows"]], incidents, now)
    return _env.get_template("dashboard.html").render(
        refresh_s=REFRESH_S,
        generated=datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        networks=list(reg.config.networks),
        network=scope.network,
        served=scope.network is None or scope.network in reg.config.proxy.networks,
        page_href=page_href,
        backoff_text=lambda until: backoff_text(until, now),
        capacity_text=capacity_text,
        horizon_text=horizon_text,
        usage=usage.summary,
        chart=usage.chart,
        updated=usage.updated,
        totals=documents.registry_totals(config, health),
        rpc_pools=documents.proxy_pools(config, health),
        endpoint_pools=documents.endpoint_pools(config, health),
        root=documents.root_endpoints(config, health, live),
        callable=callable_,
        heatmap=heat,
        heat_kinds=[k for k in _KIND_ORDER if k in kinds_seen],
        incidents=documents.incident_list(config, incidents, now),
        timeline=_timeline_with_incidents(documents.incident_timeline(config, incidents, now)),
        runtime_lines=runtime_lines(config, book),
        sockets=sockets,
        **pictures,
    )


def _timeline_with_incidents(doc: dict[str, Any]) -> dict[str, Any]:
    """Only the rows that had incidents: the page says "none" rather than a
    wall of zeros (the JSON API keeps every row)."""
    return {
        "endpoints": [e for e in doc["endpoints"] if e["total"]],
        "hosts": [h for h in doc["hosts"] if h["total"]],
    }


def _pictures(
    history: HistoryRecorder, config: Any, row_ids: list[str], incidents: Any, now: float
) -> dict[str, Any]:
    """Sparklines and incident strips of the listed endpoints, lag charts per network."""
    nodes = [e for e in config.endpoints if e.kind in NODE_KINDS]
    minutes = history.minutes([*row_ids, *(e.id for e in nodes if e.id not in row_ids)], now)
    spans: dict[str, list[tuple[float, float | None]]] = {}
    for inc in incidents:
        spans.setdefault(inc.endpoint_id, []).append((inc.started, inc.ended))
    lag = {}
    for network in config.networks:
        mine = [e for e in nodes if e.network == network]
        labels = _node_labels(mine)
        lag[network] = lag_chart({labels[e.id]: lag_series(minutes[e.id], now) for e in mine})
    return {
        "sparks": {eid: sparkline(latency_series(minutes[eid], now)) for eid in row_ids},
        "strips": {eid: incident_strip(spans.get(eid, []), now) for eid in row_ids},
        "lag_charts": lag,
    }


def _node_labels(nodes: list[Any]) -> dict[str, str]:
    """``provider kind`` for each node, with the id's tail when two would read alike."""
    names = [f"{e.provider} {e.kind.removeprefix('node-')}" for e in nodes]
    return {
        e.id: name if names.count(name) == 1 else f"{name} …{e.id[-4:]}"
        for e, name in zip(nodes, names, strict=True)
    }
