"""The document of each network (pure): ``GET /api/v1/networks`` and
``/api/v1/networks/{network}``. Its heights (the routing snapshot's tip and
finalized height, ``sidecar.probing.health.chain_heads``), the runtime its best
blocks run and its last runtime upgrade (``sidecar.probing.chain_runtime``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from common.config import Config
from sidecar.jsonfmt import iso
from sidecar.probing.chain_runtime import ChainRuntimeBook, NetworkRuntime, RuntimeVersion
from sidecar.probing.health import chain_heads
from sidecar.registry.pools import HealthMap


def _runtime(r: RuntimeVersion) -> dict[str, Any]:
    return {"spec_name": r.spec_name, "spec_version": r.spec_version}


def runtime_doc(state: NetworkRuntime | None) -> dict[str, Any] | None:
    """``runtime``: what the best blocks run; ``since_block`` is its first block
    when the upgrade to it was seen, else null (it ran when first seen)."""
    if state is None:
        return None
    return {
        **_runtime(state.runtime),
        "since_block": state.since_block,
        "seen_block": state.seen_block,
        "seen_at": iso(state.seen_at),
    }


def upgrade_doc(state: NetworkRuntime | None) -> dict[str, Any] | None:
    """``last_upgrade``: ``block`` is the first best block seen on the new
    runtime, ``after_block`` the last one seen on the old (the upgrade is in
    between: exact when consecutive), ``at`` when it was seen."""
    up = state.last_upgrade if state is not None else None
    if up is None:
        return None
    return {
        "from": _runtime(up.old),
        "to": _runtime(up.new),
        "block": up.block,
        "after_block": up.after_block,
        "at": iso(up.at),
    }


def runtime_text(state: NetworkRuntime | None) -> str | None:
    """The dashboard's line: ``runtime node-subtensor 301 · upgraded from 300 at
    block 5305, 2027-01-15 08:00 UTC``; None while the runtime is unknown."""
    if state is None:
        return None
    r = state.runtime
    text = f"runtime {r.spec_name} {r.spec_version}"
    up = state.last_upgrade
    if up is not None:
        when = datetime.fromtimestamp(up.at, UTC).strftime("%Y-%m-%d %H:%M UTC")
        text += f" · upgraded from {up.old.spec_version} at block {up.block}, {when}"
    return text


def runtime_lines(config: Config, book: ChainRuntimeBook | None) -> dict[str, str]:
    """Network -> its dashboard line, for the networks whose runtime is known."""
    lines = {n: runtime_text(book.get(n)) for n in config.networks} if book is not None else {}
    return {n: line for n, line in lines.items() if line is not None}


def network_status(
    config: Config, network: str, health: HealthMap, book: ChainRuntimeBook | None
) -> dict[str, Any]:
    """One network of the config (the caller checks the name)."""
    tip, finalized = chain_heads((e for e in config.endpoints if e.network == network), health)
    state = book.get(network) if book is not None else None
    return {
        "network": network,
        "served": network in config.proxy.networks,
        "tip": tip,
        "finalized": finalized,
        "runtime": runtime_doc(state),
        "last_upgrade": upgrade_doc(state),
    }


def networks(config: Config, health: HealthMap, book: ChainRuntimeBook | None) -> dict[str, Any]:
    """Every network of the config, in its order."""
    return {"networks": [network_status(config, n, health, book) for n in config.networks]}
