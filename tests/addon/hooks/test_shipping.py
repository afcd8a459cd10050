"""The usage shipper's addon across a config reload: batches go out with the
sidecar client of the config in force (a changed ``sidecar.token`` included),
not the one of the config the process started with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from addon.hooks.holder import RuntimeHolder
from addon.hooks.shipping import ShipperAddon
from addon.mitm import responses as mitm_responses
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


async def test_a_reload_of_proxy_usage_applies_and_early_refusals_are_counted(
    tmp_path: Path,
) -> None:
    """``proxy.usage`` reloaded in place is the shipper's from the next batch
    (``flush_s`` too); refusals sent below the addon (a 413, 431 or 408 from
    mitmproxy's layer: no call exists) reach ``chainproxy_refusals_total``."""
    holder = RuntimeHolder()
    rt = Runtime.build(_config("http://127.0.0.1:1", "t", tmp_path))
    rt.open_storage()
    holder.runtime = rt
    addon = ShipperAddon(holder)
    addon.running()
    try:
        shipper = addon.shipper
        assert shipper is not None and shipper.flush_s == 2.0
        doc = {
            "sidecar": {"url": "http://127.0.0.1:1", "token": "t"},
            "data_dir": str(tmp_path),
            "proxy": {"usage": {"flush_s": 30, "memory_max_batches": 7, "spool_max_batches": 9}},
        }
        new = rt.reload(parse_config(doc, env={}))
        new.open_storage()
        holder.runtime = new
        mitm_responses.take_refused()  # (whatever other tests left)
        for status in (413, 413, 431, 408):
            mitm_responses.json_error(status, "refused", {})
        addon._gauges()  # as the next batch is built: the config in force is read
        assert shipper.flush_s == 30 and shipper.backlog.max_batches == 7
        assert new.spool is not None and new.spool.max_batches == 9
        refusals = {k: v for k, v in new.metrics._extra.items() if "refusals" in k[0]}
        assert refusals == {("chainproxy_refusals_total", (("policy", "request"),)): 4}
    finally:
        addon.done()
