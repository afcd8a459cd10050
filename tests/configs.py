"""The one config builder of the tests: registry entries (``endpoint``) and a
whole config from them, as the document a file holds (``config_doc``) or
parsed (``make_config``); every other key is a keyword override."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.config import Config, parse_config

SCHEMES = {"node-rpc": "https", "node-wss": "wss", "data-artifact": "https", "sse": "https"}


def endpoint(
    provider: str,
    kind: str = "node-rpc",
    network: str = "finney",
    *,
    url: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One registry entry; its URL ``<scheme>://<provider>.example.org`` unless given."""
    url = url or f"{SCHEMES[kind]}://{provider}.example.org"
    return {"url": url, "provider": provider, "kind": kind, "network": network, **extra}


def config_doc(
    *endpoints: dict[str, Any], data_dir: str | Path | None = None, **top: Any
) -> dict[str, Any]:
    """A config document with these registry entries; ``top``: its other keys
    (``proxy=``, ``sidecar=``, ``probe=``...)."""
    doc: dict[str, Any] = {"registry": {"endpoints": list(endpoints)}, **top}
    if data_dir is not None:
        doc["data_dir"] = str(data_dir)
    return doc


def make_config(
    *endpoints: dict[str, Any],
    env: dict[str, str] | None = None,
    data_dir: str | Path | None = None,
    **top: Any,
) -> Config:
    """``config_doc`` parsed (with no environment unless ``env``)."""
    return parse_config(config_doc(*endpoints, data_dir=data_dir, **top), env=env or {})
