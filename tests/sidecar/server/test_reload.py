"""SIGHUP's reload of the sidecar (``sidecar/server/reload.py``), in-process
with a fake probe: endpoints added are probed at once, endpoints removed are
gone from the views, the routing snapshot and /metrics; a bad file changes
nothing, nor does one that leaves a served network with no node; where it
listens and its data_dir stay until a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from common.config import Config, parse_config
from sidecar.server.app import create_app
from sidecar.server.app_keys import CONFIG_KEY, PROBER_KEY, REGISTRY_KEY
from sidecar.server.reload import apply, keep_process_settings, reload_from
from tests.sidecar.helpers import fake_factory


def _doc(tmp: Path, ports: list[int], **top: Any) -> dict[str, Any]:
    return {
        "data_dir": str(tmp),
        "probe": {"interval_s": 0.05, "head_interval_s": 0.05},
        "registry": {
            "endpoints": [
                {
                    "url": f"http://127.0.0.1:{p}",
                    "provider": f"p{p}",
                    "kind": "node-rpc",
                    "network": "finney",
                }
                for p in ports
            ]
        },
        **top,
    }


def _config(tmp: Path, ports: list[int], **top: Any) -> Config:
    return parse_config(_doc(tmp, ports, **top), env={})


async def _until(check: Any, what: str) -> None:
    for _ in range(250):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(what)


async def test_endpoints_added_and_removed_in_place(aiohttp_client: Any, tmp_path: Path) -> None:
    heights = {f"p{p}": 100 for p in (1, 2, 3, 4)}
    app = create_app(_config(tmp_path, [1, 2, 3]), probe_factory=fake_factory(heights))
    client = await aiohttp_client(app)
    prober = app[PROBER_KEY]
    await _until(lambda: len(prober.health) == 3, "the first three probed")
    old_ids = set(prober.endpoints)

    new = _config(tmp_path, [1, 2, 4])
    assert apply(app, new) == (1, 1)
    (added,) = set(prober.endpoints) - old_ids
    (removed,) = old_ids - set(prober.endpoints)
    await _until(lambda: added in prober.health, "the added endpoint probed at once")
    assert removed not in prober.health

    assert (await (await client.get("/healthz")).json())["endpoints"] == 3
    routes = await (await client.get("/api/v1/internal/routes/finney")).json()
    assert {u["id"] for u in routes["upstreams"]} == set(prober.endpoints)
    callable_ = await (await client.get("/api/v1/endpoints/callable")).json()
    assert {row["id"] for row in callable_["rows"]} == set(prober.endpoints)
    assert (await client.get(f"/api/v1/endpoints/{removed}")).status == 404
    metrics = await (await client.get("/metrics")).text()
    assert added in metrics and removed not in metrics
    assert app[REGISTRY_KEY].config is app[CONFIG_KEY]


async def test_a_bad_file_changes_nothing(aiohttp_client: Any, tmp_path: Path) -> None:
    app = create_app(_config(tmp_path, [1, 2]), probing=False, probe_factory=fake_factory({}))
    await aiohttp_client(app)
    before = app[CONFIG_KEY]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_doc(tmp_path, [1], probe={"interval_s": -1})))
    assert reload_from(app, str(bad)) is False
    assert app[CONFIG_KEY] is before
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(_doc(tmp_path, [1])))
    assert reload_from(app, str(good)) is True
    assert len(app[CONFIG_KEY].endpoints) == 1


async def test_a_file_that_leaves_a_network_with_no_node_is_refused(
    aiohttp_client: Any, tmp_path: Path, caplog: Any
) -> None:
    """A registry cut short (a truncated file): every finney call would be
    "no upstream available"; the running registry stays."""
    app = create_app(_config(tmp_path, [1, 2]), probing=False, probe_factory=fake_factory({}))
    await aiohttp_client(app)
    before = app[CONFIG_KEY]
    cut = tmp_path / "cut.yaml"
    cut.write_text(yaml.safe_dump(_doc(tmp_path, [])))
    assert reload_from(app, str(cut)) is False
    assert app[CONFIG_KEY] is before
    assert "a reload cannot leave finney with no node-rpc endpoint (it has 2)" in caplog.text


async def test_a_file_that_moves_it_is_refused_whole(
    aiohttp_client: Any, tmp_path: Path, caplog: Any
) -> None:
    """systemd's reload signals each process: a file that moves ``data_dir``
    (or where the sidecar listens) is refused by the sidecar too, whole, as
    the proxies refuse it (it used to apply the registry and keep the rest)."""
    started = _config(tmp_path, [1, 2])
    app = create_app(started, probing=False, probe_factory=fake_factory({}))
    await aiohttp_client(app)
    before = app[CONFIG_KEY]
    moved = tmp_path / "moved.yaml"
    moved.write_text(yaml.safe_dump(_doc(tmp_path / "elsewhere", [1])))
    assert reload_from(app, str(moved), started) is False
    assert app[CONFIG_KEY] is before and len(before.endpoints) == 2
    assert "data_dir: a reload cannot change it" in caplog.text
    same = tmp_path / "same.yaml"
    same.write_text(yaml.safe_dump(_doc(tmp_path, [1])))
    assert reload_from(app, str(same), started) is True


def test_where_it_listens_and_its_data_dir_stay(tmp_path: Path) -> None:
    running = _config(tmp_path, [1], sidecar={"port": 9001})
    new = _config(tmp_path / "other", [1, 2], sidecar={"port": 9002, "token": "t0ken"})
    kept = keep_process_settings(running, new)
    assert kept.sidecar.port == 9001 and kept.data_dir == running.data_dir
    assert kept.sidecar.token == "t0ken" and len(kept.endpoints) == 2  # the rest is new
