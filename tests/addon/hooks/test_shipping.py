"""The usage shipper's addon across a config reload: batches go out with the
sidecar client of the config in force (a changed ``sidecar.token`` included),
not the one of the config the process started with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from addon.hooks.holder import RuntimeHolder
from addon.hooks.shipping import ShipperAddon
from addon.runtime import Runtime
from addon.upstream.transport import new_session
from common.config import Config, parse_config
from tests.addon.helpers import usage_record


def _config(url: str, token: str, data_dir: Path) -> Config:
    return parse_config(
        {"sidecar": {"url": url, "token": token}, "data_dir": str(data_dir)}, env={}
    )


async def test_a_reload_that_changes_the_sidecar_token_ships_with_the_new_one(
    aiohttp_server: Any, tmp_path: Path
) -> None:
    accepted: list[str] = []
    token = {"now": "old-token"}  # the sidecar's, changed with the proxy's config

    async def usage(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {token['now']}":
            return web.json_response({"error": "unauthorized"}, status=401)
        accepted.append((await request.json())["batch_id"])
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/api/v1/internal/usage", usage)
    server = await aiohttp_server(app)
    url = str(server.make_url("")).rstrip("/")
    holder = RuntimeHolder()
    async with new_session() as session:
        rt = Runtime.build(_config(url, "old-token", tmp_path))
        rt.open_storage()
        rt.attach_session(session)
        holder.runtime = rt
        addon = ShipperAddon(holder)
        addon.running()
        try:
            shipper = addon.shipper
            assert shipper is not None
            usage_record(rt.usage)
            shipper.spool_pending()
            assert await shipper.deliver_spooled() is True  # the first token works

            token["now"] = "new-token"  # the operator rotates it: sidecar, then proxy
            new = rt.reload(_config(url, "new-token", tmp_path))
            new.open_storage()
            holder.runtime = new
            usage_record(new.usage)
            shipper.spool_pending()
            assert await shipper.deliver_spooled() is True  # not 401 with the old one
            assert len(accepted) == 2 and len(new.spool or ()) == 0
        finally:
            addon.done()
