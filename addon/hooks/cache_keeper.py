"""The edge cache's writes still waiting for their batch (``addon/cache/store.py``
gathers them for ``WRITE_EVERY_S``) go to disk at a stop or a script reload:
a SIGTERM right after an answer must not lose its entry. Synchronous, as
mitmproxy's ``done`` is; it runs after the drain has answered what was in
flight, so the last answers' entries are among them."""

from __future__ import annotations

import logging

from addon.hooks.holder import RuntimeHolder

log = logging.getLogger("chainproxy")


class CacheKeeper:
    def __init__(self, holder: RuntimeHolder) -> None:
        self.holder = holder

    def done(self) -> None:
        rt = self.holder.runtime
        if rt is None or rt.cache is None:
            return
        try:
            rt.cache.close()  # a later use opens it again (a hot reload keeps the store)
        except Exception:  # the stop goes on; the entries are a cache
            log.exception("edge cache: writing the pending entries at the stop failed")
