"""The HTTP answers a node gives besides JSON-RPC results: none at all (a cut
connection), a bare error status (``http_status``: 429 and 503 with
``Retry-After: 1``), a rate limit's 429 (``limit_rps``), a JSON document."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from aiohttp import web

JSON_CT = "application/json"


def drop(request: web.Request) -> web.StreamResponse:
    """Close the connection without a response.

    aiohttp's attempt to send the returned response then fails with a
    ConnectionError, which it treats as a client disconnect (nothing logged).
    """
    transport = request.transport
    if transport is not None:
        transport.close()
    return web.Response()


def status_response(status: int) -> web.Response:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return web.Response(status=status, text=f"{status} {phrase}\n", headers=headers)


TOO_MANY_REQUESTS = -32029  # the code public RPC providers answer a rate limit with


def too_many_requests(rid: Any, retry_after: str | None) -> web.Response:
    """The ``limit_rps`` fault's 429: a JSON-RPC error (``id`` that of the call,
    null for a batch), ``Retry-After`` only when the fault gives one."""
    doc = {
        "jsonrpc": "2.0",
        "id": rid,
        "error": {"code": TOO_MANY_REQUESTS, "message": "Too many requests"},
    }
    resp = json_response(doc, status=429)
    if retry_after is not None:
        resp.headers["Retry-After"] = retry_after
    return resp


def json_response(doc: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(doc, separators=(",", ":")).encode(), status=status, content_type=JSON_CT
    )
