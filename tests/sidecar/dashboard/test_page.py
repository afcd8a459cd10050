"""The dashboard page tells the truth (aiohttp test client): a cell with no
probe yet says "not probed" in readable colours, the statistics' updated time
is shown whenever it is known, ``?network=`` shows one network with links to
the others, and -wss pools count as serving the proxy's subscriptions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from common.config import Config, parse_config
from sidecar.probing.results import ProbeResult
from sidecar.server.app import create_app
from sidecar.server.app_keys import PROBER_KEY
from tests.fakes import FakeClock
from tests.sidecar.metrics_batch import batch_with_metrics

T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
USAGE = "/api/v1/internal/usage"


def config(tmp: Path, served: list[str] | None = None) -> Config:
    def ep(port: int, provider: str, network: str, kind: str = "node-rpc") -> dict[str, Any]:
        scheme = "ws" if kind == "node-wss" else "http"
        return {"url": f"{scheme}://127.0.0.1:{port}", "provider": provider,
                "kind": kind, "network": network}  # fmt: skip

    raw: dict[str, Any] = {
        "data_dir": str(tmp),
        "registry": {
            "endpoints": [
                ep(1, "alpha", "finney"),
                ep(2, "alpha", "finney", "node-wss"),
                ep(3, "beta", "finney"),
                ep(4, "tau", "test"),
            ]
        },
    }
    if served is not None:
        raw["proxy"] = {"networks": served}
    return parse_config(raw, env={})


async def start(aiohttp_client: Any, cfg: Config) -> tuple[Any, Any, FakeClock]:
    clock = FakeClock()
    app = create_app(cfg, probing=False, clock=clock)
    return app, await aiohttp_client(app), clock


def section(page: str, name: str) -> str:
    match = re.search(rf'<section id="{name}">(.*?)</section>', page, re.S)
    assert match, name
    return match.group(1)


async def get(client: Any, path: str = "/", status: int = 200) -> str:
    r = await client.get(path)
    assert r.status == status
    return await r.text()


async def test_a_cell_without_a_probe_says_not_probed(aiohttp_client: Any, tmp_path: Path) -> None:
    cfg = config(tmp_path)
    app, client, _clock = await start(aiohttp_client, cfg)
    alpha_rpc = cfg.endpoints[0]
    app[PROBER_KEY].observe(alpha_rpc, ProbeResult(alpha_rpc.id, T0, "full", "live", 80, 10, 8))
    heat = section(await get(client), "heatmap")
    assert "bNone" not in heat and ">down<" not in heat
    cells = dict(re.findall(r'<td class="cell ([^"]+)"[^>]*>([^<]*)</td>', heat))
    assert cells["b1"] == "80 ms"
    assert cells["np"] == "not probed"
    assert '<i class="np"></i>not probed yet' in heat  # the legend says what it means


def test_the_not_probed_colours_are_readable() -> None:
    css = (Path(__file__).parents[3] / "sidecar/dashboard/templates/dashboard.html").read_text()
    rule = re.search(r"td\.cell\.np[^{]*\{([^}]*)\}", css)
    assert rule, "a style for not-probed cells"
    style = dict(p.split(":", 1) for p in rule.group(1).replace(" ", "").split(";") if p)
    assert style["background"] != style["color"]
    assert style["background"].lower() not in ("#fff", "#ffffff", "white")  # not white on white


async def test_updated_is_shown_whenever_it_is_known(aiohttp_client: Any, tmp_path: Path) -> None:
    _app, client, clock = await start(aiohttp_client, config(tmp_path))
    usage = section(await get(client), "usage")
    assert "Statistics updated" not in usage and "no usage report has arrived yet" in usage
    heartbeat = batch_with_metrics({"proxy_id": "h:1"}, sent_at=T0)
    assert (await client.post(USAGE, json=heartbeat)).status == 200
    clock.t = T0 + 180
    usage = section(await get(client), "usage")
    assert "Freshness unknown" not in usage  # fresh: no note …
    assert "Statistics updated" in usage  # … and still the time, in UTC and how long ago
    assert "2027-01-15 08:00:00 UTC (3 min ago)" in usage
    assert 'datetime="2027-01-15T08:00:00Z"' in usage
    clock.t = T0 + 3 * 3600
    usage = section(await get(client), "usage")
    assert (
        "Freshness unknown: the last usage report arrived 2027-01-15 08:00:00 UTC (3 h ago)"
        in usage
    )


async def test_one_network_with_links_to_the_others(aiohttp_client: Any, tmp_path: Path) -> None:
    _app, client, _clock = await start(aiohttp_client, config(tmp_path))
    page = await get(client)
    nav = re.search(r'<nav class="meta networks".*?</nav>', page, re.S)
    assert nav and '<a href="?network=finney">finney</a>' in nav.group(0)
    assert '<a href="?network=test">test</a>' in nav.group(0)
    assert '<strong aria-current="page">all</strong>' in nav.group(0)
    assert "tau" in section(page, "callable") and "alpha" in section(page, "callable")

    page = await get(client, "/?network=test")
    assert '<strong aria-current="page">test</strong>' in page and '<a href="/">all</a>' in page
    for name in ("callable", "root-endpoints", "heatmap", "rpc-pools"):
        assert "tau" in section(page, name) or "test-rpc" in section(page, name), name
        assert "alpha" not in section(page, name) and "finney" not in section(page, name), name
    assert "last 7 days · test" in section(page, "usage")
    by_network = section(page, "usage")
    assert '<a href="?network=finney">finney</a>' in by_network  # the table links each network


async def test_unknown_networks_are_a_404_page(aiohttp_client: Any, tmp_path: Path) -> None:
    _app, client, _clock = await start(aiohttp_client, config(tmp_path))
    page = await get(client, "/?network=<b>mars</b>", status=404)
    assert "unknown network" in page and "<b>mars" not in page  # escaped
    assert '<a href="/">back to the dashboard</a>' in page


async def test_a_network_the_proxy_does_not_serve_says_so(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    _app, client, _clock = await start(aiohttp_client, config(tmp_path, served=["finney"]))
    usage = section(await get(client, "/?network=test"), "usage")
    assert "The proxy does not serve test" in usage and "requests</span>" not in usage


async def test_pager_links_keep_the_network(aiohttp_client: Any, tmp_path: Path) -> None:
    many = [
        {"url": f"https://sn{i}.example/a.json", "provider": f"sn{i}", "kind": "data-artifact",
         "network": "test", "subnet": i}
        for i in range(1, 31)
    ]  # fmt: skip
    raw = {"data_dir": str(tmp_path), "registry": {"endpoints": many}}
    _app, client, _clock = await start(aiohttp_client, parse_config(raw, env={}))
    pager = section(await get(client, "/?network=test"), "callable")
    assert 'href="?page=2&amp;network=test#callable"' in pager
    pager = section(await get(client, "/?page=2&network=test"), "callable")
    assert 'href="?page=1&amp;network=test#callable" rel="prev"' in pager
    assert 'href="?page=2#callable"' in section(
        await get(client), "callable"
    )  # unscoped: as before


async def test_wss_pools_serve_the_proxys_subscriptions(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    _app, client, _clock = await start(aiohttp_client, config(tmp_path))
    pools = section(await get(client), "rpc-pools")
    row = re.search(r"<tr><td>finney-wss</td>.*?</tr>", pools)
    assert row and "<td>Proxy</td>" in row.group(0)
    totals = await (await client.get("/api/v1/registry/totals")).json()
    assert (totals["rpc_pools"], totals["rpc_pools_proxy_eligible"]) == (3, 3)


async def test_the_methods_that_cost_most_units_are_listed(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    from tests.sidecar.usage.stats.helpers import wire_batch, wire_rollup

    cfg = config(tmp_path)
    _app, client, clock = await start(aiohttp_client, cfg)
    assert "Top methods by quota units" not in section(await get(client), "usage")
    clock.t = T0
    ep = next(e.id for e in cfg.endpoints if e.kind == "node-rpc")
    minute = int(T0 // 60)
    rollups = [
        {**wire_rollup(minute, [5] * 2, endpoint=ep, method="state_getKeysPaged"), "units": 20},
        {**wire_rollup(minute, [5] * 30, endpoint=ep), "units": 30},
    ]
    batch = {**wire_batch(rollups), "sent_at": T0}
    assert (await client.post(USAGE, json=batch)).status == 200
    usage = section(await get(client), "usage")
    table = usage[usage.index("Top methods by quota units") :]
    rows = re.findall(r"<tr><td>([^<]+)</td><td class=\"num\">([\d,]+)</td>", table)
    assert rows == [("chain_getHeader", "30"), ("state_getKeysPaged", "2")]
    assert "60.0%" in table and "40.0%" in table
