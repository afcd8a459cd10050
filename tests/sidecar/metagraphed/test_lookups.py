"""What a Metagraphed client joins and asks, answered whatever the data: a
provider found by its slug or by the name endpoint rows carry, a projection
checked against the rows' schema (not the rows present), one ``window``
(the Metagraphed sweep, 2026-11-30)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from sidecar.server.app import create_app
from tests.sidecar.metagraphed.test_clients_sidecar import _config, _running


async def _get(base: str, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(base + path) as r:
        return r.status, await r.json()


async def test_a_provider_is_found_by_its_slug_and_by_its_name(
    aiohttp_server: Any, tmp_path: Path
) -> None:
    """``Data_Co``'s slug is ``data-co``: the join ``endpoints(provider=slug)``
    found nothing, and ``/providers/{name}`` (the name rows and the
    ``x-metagraph-rpc-provider`` header carry) was a 404."""
    _, _, _, base = await _running(aiohttp_server, tmp_path)
    status, doc = await _get(base, "/api/v1/providers")
    slugs = {p["name"]: p["slug"] for p in doc["data"]["providers"]}
    assert slugs["Data_Co"] == "data-co"
    for wanted in ("data-co", "Data_Co", "DATA-CO"):
        status, doc = await _get(base, f"/api/v1/endpoints?provider={wanted}")
        assert status == 200 and [e["provider"] for e in doc["data"]["endpoints"]] == ["Data_Co"]
    for key in ("data-co", "Data_Co"):
        status, doc = await _get(base, f"/api/v1/providers/{key}")
        assert status == 200 and doc["data"]["provider"]["slug"] == "data-co", doc
    assert (await _get(base, "/api/v1/providers/nobody"))[0] == 404


async def test_a_projection_of_an_empty_list_is_the_projection_of_a_full_one(
    aiohttp_server: Any, tmp_path: Path
) -> None:
    """No incident yet: ``fields=id`` was a 400 (checked against the rows
    present) that became a 200 once an endpoint failed."""
    server = await aiohttp_server(create_app(_config(tmp_path), probing=False))
    base = str(server.make_url("")).rstrip("/")
    status, doc = await _get(base, "/api/v1/endpoint-incidents?fields=id,severity")
    assert status == 200 and doc["data"]["incidents"] == [], doc
    status, doc = await _get(base, "/api/v1/endpoint-incidents?fields=colour")
    assert status == 400 and doc["meta"]["parameter"] == "fields", doc
    status, doc = await _get(base, "/metagraphed/api/v1/incidents?fields=surface_id")
    assert status == 200, doc


async def test_a_window_given_twice_is_refused_as_on_every_list_route(
    aiohttp_server: Any, tmp_path: Path
) -> None:
    server = await aiohttp_server(create_app(_config(tmp_path), probing=False))
    base = str(server.make_url("")).rstrip("/")
    status, doc = await _get(base, "/api/v1/rpc/usage?window=7d&window=7d")
    assert status == 400 and doc["meta"]["parameter"] == "window", doc
    assert (await _get(base, "/api/v1/rpc/usage?window=7d"))[0] == 200
