"""The one shape of every error answer of the sidecar (the OpenAPI ``Error``
schema): ``{"error": {"code": <status>, "message": "…"}}``."""

from __future__ import annotations

from aiohttp import web


def json_error(status: int, message: str, **headers: str) -> web.Response:
    """An error answer; ``headers`` for e.g. ``Retry-After`` on a 503."""
    return web.json_response(
        {"error": {"code": status, "message": message}}, status=status, headers=headers
    )
