"""What a reload cannot change (pure): the keys a running stack was started
with and keeps until it restarts. The launcher's ``chainproxy reload`` and a
SIGHUP straight to a proxy process (systemd's ``ExecReload``) both refuse a
file that changes one, with the same one line, and keep the running config."""

from __future__ import annotations

from typing import Any

from common.config.model import Config
from common.config.readers import shown_url


def restart_only(running: Config, new: Config) -> str | None:
    """What ``new`` changes that a reload cannot apply, as ``key: problem``."""
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
