"""What a reload cannot change (pure): the keys a running stack was started
with and keeps until it restarts, and a served network's last node-rpc
endpoint. The launcher's ``chainproxy reload`` and a SIGHUP straight to a
proxy or sidecar process (systemd's ``ExecReload``) all refuse such a file,
with the same one line, and keep the running config."""

from __future__ import annotations

from typing import Any

from common.config.model import Config
from common.config.readers import shown_url


def restart_only(running: Config, new: Config) -> str | None:
    """What ``new`` changes that a reload cannot apply, as ``key: problem``."""
    return fixed_keys(running, new) or lost_network(running, new)


def fixed_keys(running: Config, new: Config) -> str | None:
    """A key ``new`` changes that only a restart applies (where the sidecar
    listens, ``data_dir``), as ``key: problem``."""
    fixed: list[tuple[str, Any, Any]] = [
        ("sidecar.host", running.sidecar.host, new.sidecar.host),
        ("sidecar.port", running.sidecar.port, new.sidecar.port),
        ("sidecar.url", running.sidecar.url, new.sidecar.url),
        ("data_dir", running.data_dir.resolve(), new.data_dir.resolve()),
    ]
    for key, was, now in fixed:
        if was != now:
            if key == "sidecar.url":  # it may carry a password: never shown
                was, now = shown_url(str(was)), shown_url(str(now))
            return f"{key}: a reload cannot change it ({was} -> {now}); restart the stack"
    return None


def lost_network(running: Config, new: Config) -> str | None:
    """A served network ``new`` leaves with no node-rpc endpoint where the
    running config has some, as ``key: problem``."""
    for network in new.proxy.networks:
        had = len(running.rpc_endpoints(network))
        if had and not new.rpc_endpoints(network):
            # a file cut short (or an edit gone wrong) would leave every call
            # of a network that is served "no upstream available"
            return (
                f"registry.endpoints: a reload cannot leave {network} with no node-rpc "
                f"endpoint (it has {had}); restart the stack to serve it with none"
            )
    return None
