"""Non-RPC paths (dashboard, public API) are passed to the sidecar by the addon
itself, through the sidecar client (``addon/reporting/sidecar_client.py``): mitmproxy
never opens a connection of its own, so no Host header or absolute-form URL
can point the proxy elsewhere, and a sidecar that is down gets a JSON 502
instead of mitmproxy's HTML page."""

from __future__ import annotations

import logging

import aiohttp
from mitmproxy import http

from addon.hooks.holder import RuntimeHolder
from addon.mitm.responses import CORS_HEADERS, json_response, make_headers
from addon.pipeline.context import SIDECAR_PATH_KEY
from addon.reporting.sidecar_client import SidecarError

log = logging.getLogger("chainproxy")

_REQUEST_HEADERS = (
    "accept",
    "accept-language",
    "content-type",
    "if-none-match",
    "if-modified-since",
    "access-control-request-method",
    "access-control-request-headers",
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
    # Metagraphed's API shapes (docs/METAGRAPHED.md): what its clients read
    "link",
    "x-metagraph-contract-version",
    "x-metagraph-error-code",
    "access-control-allow-methods",
    "access-control-allow-headers",
    "access-control-max-age",
)


class SidecarPassthrough:
    def __init__(self, holder: RuntimeHolder) -> None:
        self.holder = holder

    async def request(self, flow: http.HTTPFlow) -> None:
        path = flow.metadata.get(SIDECAR_PATH_KEY)
        rt = self.holder.runtime
        if flow.response or flow.error or not flow.live or path is None or rt is None:
            return
        req = flow.request
        headers = {k: v for k, v in req.headers.items() if k.lower() in _REQUEST_HEADERS}
        headers["X-Forwarded-For"] = (
            flow.client_conn.peername[0] if flow.client_conn.peername else ""
        )
        if any(_control(v) for v in headers.values()):
            # (aiohttp refuses to send it: a ValueError, once a 500 and a traceback)
            flow.response = json_response(
                400,
                {"error": {"code": 400, "message": "a request header holds a control character"}},
            )
            return
        try:
            status, body, answer_headers = await rt.sidecar.passthrough(
                req.method, path, req.raw_content or None, headers
            )
        except (TimeoutError, aiohttp.ClientError, OSError, SidecarError) as e:
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
            return
        out = [(k, v) for k, v in answer_headers if k.lower() in _RESPONSE_HEADERS]
        response = http.Response.make(status, body, make_headers(out))
        theirs = [v for k, v in answer_headers if k.lower() == "access-control-expose-headers"]
        if theirs:  # the sidecar's exposed headers (Metagraphed's) beside chainproxy's
            response.headers[_EXPOSE] = _merged(_OURS_EXPOSED, *theirs)
        if req.method == "HEAD":  # the length a GET would have, as the sidecar says
            length = [v for k, v in answer_headers if k.lower() == "content-length"]
            if length:
                response.headers["Content-Length"] = length[0]
        flow.response = response


_EXPOSE = "Access-Control-Expose-Headers"
_OURS_EXPOSED = dict(CORS_HEADERS)[_EXPOSE]


def _merged(*lists: str) -> str:
    """Comma-separated header names, each once (the first spelling kept)."""
    out: dict[str, str] = {}
    for names in lists:
        for name in names.split(","):
            if name.strip():
                out.setdefault(name.strip().lower(), name.strip())
    return ", ".join(out.values())


def _control(value: str) -> bool:
    """A character no HTTP header value may hold (tab aside)."""
    return any((c < " " and c != "\t") or c == "\x7f" for c in value)
