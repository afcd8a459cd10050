"""Handlers of the per-network paths (``sidecar.registry.networks``; URLs in
``sidecar.server.routes``)."""

from __future__ import annotations

from aiohttp import web

from sidecar.probing.chain_runtime import ChainRuntimeBook
from sidecar.registry.networks import network_status, networks
from sidecar.server.app_keys import PROBER_KEY, REGISTRY_KEY
from sidecar.server.json_errors import json_error


def chain_runtime_book(app: web.Application) -> ChainRuntimeBook | None:
    """The prober's chain runtime book (None before the app started)."""
    prober = app.get(PROBER_KEY)
    return prober.chain_runtimes if prober is not None else None


async def get_networks(request: web.Request) -> web.Response:
    reg = request.app[REGISTRY_KEY]
    return web.json_response(networks(reg.config, reg.health, chain_runtime_book(request.app)))


async def get_network(request: web.Request) -> web.Response:
    """One network; an unknown name → 404."""
    reg = request.app[REGISTRY_KEY]
    network = request.match_info["network"]
    if network not in reg.config.networks:
        return json_error(404, f"unknown network {network[:40]!r}")
    return web.json_response(
        network_status(reg.config, network, reg.health, chain_runtime_book(request.app))
    )
