"""The dashboard's one-network scope (pure): ``/?network=…`` checked, the
config narrowed to that network, and the links between networks and pages
that keep it."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlencode

from common.config import Config
from sidecar.registry.documents import PageError


def parse_network(config: Config, raw: str | None) -> str | None:
    """``?network=`` → one of the config's networks, or None (all) when absent or
    empty; another value → ``PageError(404)`` naming the known ones."""
    if not raw:
        return None
    if raw not in config.networks:
        known = ", ".join(config.networks)
        raise PageError(404, f"unknown network {raw[:40]!r} (known: {known})")
    return raw


def scoped(config: Config, network: str | None) -> Config:
    """The config narrowed to one network: its endpoints only, so every registry
    view (pools, endpoint lists, heatmap, incidents) shows that network alone."""
    if network is None:
        return config
    return dataclasses.replace(
        config,
        networks={network: config.networks[network]},
        endpoints=tuple(e for e in config.endpoints if e.network == network),
    )


def page_href(network: str | None, page: int | None = None, anchor: str = "") -> str:
    """A link to the dashboard keeping the network scope: ``?page=2&network=test#callable``."""
    query = {k: v for k, v in (("page", page), ("network", network)) if v is not None}
    return (f"?{urlencode(query)}" if query else "/") + (f"#{anchor}" if anchor else "")
