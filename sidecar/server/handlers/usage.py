"""Handlers of the usage statistics' paths (URLs in ``sidecar.server.routes``).

* ``POST /api/v1/internal/usage`` (bearer token, checked by the app's
  ``internal_token`` middleware): a batch of per-minute rollups (the wire form
  is in ``sidecar.usage.stats.batch.parse_batch``). 200 ``{"accepted": true,
  "duplicate": false, "rollups": n}``; the same ``batch_id`` again → 200 with
  ``"duplicate": true`` and nothing counted twice. A bad batch → 400 naming
  the problem, a body over 16 MiB → 413 (both: do not retry), the database
  unavailable → 503 with ``Retry-After`` (retry later); nothing is ever
  partially stored.
* ``GET /api/v1/usage[?network=finney]``: the summary of ``sidecar.usage.stats.summary``;
  an unknown network → 404.

The work is ``UsageService``'s (``sidecar.usage.service``, ``app[USAGE_KEY]``).
"""

from __future__ import annotations

from aiohttp import web

from common.usage_wire import BatchError
from sidecar.server.app_keys import USAGE_KEY
from sidecar.server.json_errors import json_error
from sidecar.usage.store import StoreUnavailable

MAX_BODY_BYTES = 16 * 1_048_576
RETRY_AFTER_S = 10


class _TooLarge(Exception):
    pass


async def _read_body(request: web.Request, limit: int) -> bytes:
    """The body, up to ``limit`` bytes (the app-wide ``client_max_size`` of 1 MiB
    is too small for a full batch, so the stream is read here)."""
    if request.content_length is not None and request.content_length > limit:
        raise _TooLarge
    buf = bytearray()
    async for chunk in request.content.iter_chunked(1 << 16):
        buf += chunk
        if len(buf) > limit:
            raise _TooLarge
    return bytes(buf)


def _unavailable(message: str) -> web.Response:
    return json_error(503, message, **{"Retry-After": str(RETRY_AFTER_S)})


async def post_usage(request: web.Request) -> web.Response:
    svc = request.app[USAGE_KEY]
    try:
        body = await _read_body(request, MAX_BODY_BYTES)
    except _TooLarge:
        svc.batches_rejected += 1
        return json_error(413, f"usage batch body larger than {MAX_BODY_BYTES} bytes")
    try:
        result = await svc.ingest_body(body)
    except BatchError as e:
        return json_error(400, f"bad usage batch: {e}")
    except StoreUnavailable as e:
        return _unavailable(f"{e}; retry later")
    return web.json_response(
        {"accepted": True, "duplicate": result.duplicate, "rollups": result.rollups}
    )


async def get_usage(request: web.Request) -> web.Response:
    svc = request.app[USAGE_KEY]
    if len(request.query.getall("network", [])) > 1:
        return json_error(400, "give network once")  # as ?page= elsewhere: never a silent pick
    network = request.query.get("network") or None
    if network is not None and network not in svc.config.proxy.networks:
        known = ", ".join(svc.config.proxy.networks)
        return json_error(404, f"unknown network {network[:40]!r} (known: {known})")
    try:
        doc = await svc.summary(network)
    except StoreUnavailable as e:
        return _unavailable(str(e))
    return web.json_response(doc)
