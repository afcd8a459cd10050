"""The one slot the hooks share: the runtime in force, replaced whole when
the ``Settings`` addon reads a new config. Only the hooks (and the addon
list that makes them) touch it: nothing below them knows a reload happened."""

from __future__ import annotations

from addon.runtime import Runtime


class RuntimeHolder:
    """The one mutable slot the addons share: replaced whole on reconfigure."""

    def __init__(self) -> None:
        self.runtime: Runtime | None = None
