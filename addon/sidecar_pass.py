"""Non-RPC paths (dashboard, public API) are passed to the sidecar by the addon
itself, over the shared session: mitmproxy never opens a connection of its own,
so no Host header or absolute-form URL can point the proxy elsewhere, and a
sidecar that is down gets a JSON 502 instead of mitmproxy's HTML page."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from mitmproxy import http
from yarl import URL

from addon.forward import new_session
from addon.respond import json_response, make_headers
from addon.runtime import RuntimeHolder
from addon.stages import SIDECAR_PATH_KEY

log = logging.getLogger("chainproxy")

_REQUEST_HEADERS = (
    "accept",
    "accept-language",
    "content-type",
    "if-none-match",
    "if-modified-since",
    "user-agent",
    "authorization",
)
_RESPONSE_HEADERS = (
    "content-type",
    "cache-control",
    "etag",
    "last-modified",
    "location",
    "refresh",
    "retry-after",
    "allow",
    "vary",
)
_MAX_BODY = 16 * 1_048_576


class SidecarPassthrough:
    def __init__(self, holder: RuntimeHolder) -> None:
        self.holder = holder

    async def request(self, flow: http.HTTPFlow) -> None:
        path = flow.metadata.get(SIDECAR_PATH_KEY)
        rt = self.holder.runtime
        if flow.response or flow.error or not flow.live or path is None or rt is None:
            return
        if rt.session is None:
            rt.attach_session(new_session())
        assert rt.session is not None
        req = flow.request
        headers = {k: v for k, v in req.headers.items() if k.lower() in _REQUEST_HEADERS}
        peer = flow.client_conn.peername[0] if flow.client_conn.peername else ""
        headers["X-Forwarded-For"] = peer
        # encoded=True: yarl must not decode the path we checked a second time.
        url = URL(rt.config.sidecar.url + path, encoded=True)
        try:
            async with asyncio.timeout(rt.config.proxy.sidecar_timeout_s):
                async with rt.session.request(
                    req.method,
                    url,
                    data=req.raw_content or None,
                    headers=headers,
                    allow_redirects=False,
                ) as resp:
                    body = await resp.content.read(_MAX_BODY)
                    out = [
                        (k, v) for k, v in resp.headers.items() if k.lower() in _RESPONSE_HEADERS
                    ]
                    flow.response = http.Response.make(resp.status, body, make_headers(out))
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            log.warning("sidecar unreachable for %s %s: %s", req.method, path, type(e).__name__)
            flow.response = json_response(
                502,
                {
                    "error": {
                        "code": 502,
                        "message": "sidecar unreachable: dashboard and API are "
                        "unavailable; JSON-RPC under /rpc/v1/<network> still works",
                    }
                },
            )
