"""``HttpDirect`` as mitmproxy sees it: it handles only the hooks it means to."""

from __future__ import annotations

from mitmproxy import hooks

import addon.addons  # noqa: F401  # every hook class registered
from addon.hooks.http_direct import HttpDirect


def test_only_its_own_hooks_are_mitmproxy_hooks() -> None:
    handled = {name for name in hooks.all_hooks if callable(getattr(HttpDirect, name, None))}
    assert handled == {"response", "client_disconnected"}
