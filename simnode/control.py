"""The control endpoints under ``/_sim/``: ``GET /_sim/state``,
``POST /_sim/control`` (a JSON object of fault keys, see ``Faults``),
``POST /_sim/reset``, ``GET /_sim/arrivals[?since=<unix time>]`` (the log of
requests received, ``simnode.arrivals``); any other ``/_sim/`` path is a 404,
never an RPC call."""

from __future__ import annotations

import json
from typing import Any, Protocol

from aiohttp import web

from .arrivals import ArrivalLog
from .faults import Faults
from .replies import json_response


class Controlled(Protocol):
    """What the control endpoints need of their node (``SimNode``)."""

    arrivals: ArrivalLog

    @property
    def faults(self) -> Faults: ...

    def state(self) -> dict[str, Any]: ...

    def reset(self) -> dict[str, Any]: ...

    def apply_faults(self, changes: dict[str, Any]) -> bool: ...

    def die(self) -> None: ...


def add_control_routes(app: web.Application, node: Controlled) -> None:
    """Before the RPC routes: they take every other path."""

    async def state(request: web.Request) -> web.StreamResponse:
        return json_response(node.state())

    async def reset(request: web.Request) -> web.StreamResponse:
        return json_response(node.reset())

    async def arrivals(request: web.Request) -> web.StreamResponse:
        since = request.query.get("since")
        try:
            after = None if since is None else float(since)
        except ValueError:
            return json_response({"error": "since must be a number"}, status=400)
        return json_response(node.arrivals.to_json(after))

    async def control(request: web.Request) -> web.StreamResponse:
        try:
            changes = json.loads(await request.read() or b"{}")
        except ValueError:
            return json_response({"error": "body must be a JSON object"}, status=400)
        if not isinstance(changes, dict):
            return json_response({"error": "body must be a JSON object"}, status=400)
        try:
            die = node.apply_faults(changes)
        except (ValueError, TypeError) as exc:
            return json_response({"error": str(exc)}, status=400)
        resp = json_response(node.faults.to_json())
        if die:
            # Answer the controller first, then die.
            await resp.prepare(request)
            await resp.write_eof()
            node.die()
        return resp

    async def unknown(request: web.Request) -> web.StreamResponse:
        return json_response({"error": f"unknown control endpoint {request.path}"}, status=404)

    app.router.add_get("/_sim/state", state)
    app.router.add_post("/_sim/control", control)
    app.router.add_post("/_sim/reset", reset)
    app.router.add_get("/_sim/arrivals", arrivals)
    app.router.add_route("*", "/_sim/{tail:.*}", unknown)
