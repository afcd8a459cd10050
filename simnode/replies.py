"""The HTTP answers a node gives besides JSON-RPC results: none at all (a cut
connection), a bare error status, a JSON document."""

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


def json_response(doc: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(doc, separators=(",", ":")).encode(), status=status, content_type=JSON_CT
    )
