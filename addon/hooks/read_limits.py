"""The read limits' addon: mitmproxy's ``load`` patches them in
(``addon/mitm/limits.py``), its ``done`` (a script reload, or the end) takes
them out. Each config's limits reach them through the ``Settings`` addon."""

from __future__ import annotations

from typing import Any

from addon.mitm.limits import ReadLimits


class ReadLimitsAddon:
    def __init__(self, limits: ReadLimits) -> None:
        self.limits = limits

    def load(self, loader: Any) -> None:
        self.limits.install()

    def done(self) -> None:
        self.limits.uninstall()
