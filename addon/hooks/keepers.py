"""What the process keeps on disk beyond a call, made to outlast a stop.

``SizesKeeper``: the answer-size table (``addon/quota/sizes_file.py``), written
by a thread every ``SAVE_EVERY_S`` when it changed, and once more at a stop
or reload (synchronously: mitmproxy's ``done`` is). A failed write (a full
disk) is logged when the writes start failing and when they work again, and
tried again at the next turn; it never touches a call.

``CacheKeeper``: the edge cache's writes still waiting for their batch
(``addon/cache/store.py`` gathers them for ``WRITE_EVERY_S``) go to disk at a
stop or a script reload: a SIGTERM right after an answer must not lose its
entry. It runs after the drain has answered what was in flight, so the last
answers' entries are among them."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from addon.hooks.holder import RuntimeHolder
from addon.quota.sizes_file import SAVE_EVERY_S, save_sizes
from common.outage import Outage

log = logging.getLogger("chainproxy")


class SizesKeeper:
    def __init__(self, holder: RuntimeHolder, every_s: float = SAVE_EVERY_S) -> None:
        self.holder = holder
        self.every_s = every_s
        self._saved: tuple[Path, int] | None = None  # (file, the table's changes) last written
        self._task: asyncio.Task[None] | None = None
        self._outage = Outage()

    def running(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            try:
                due = self._due()
                if due is not None:
                    await asyncio.to_thread(self._save, *due)
            except Exception:  # a bug here must not end the keeping for good
                log.exception("answer sizes: the periodic write failed")

    def _due(self) -> tuple[Path, dict[str, float], int] | None:
        """What to write now: None when nothing changed since the last write."""
        rt = self.holder.runtime
        if rt is None or rt.lasting.sizes_path is None:
            return None
        path, sizes = rt.lasting.sizes_path, rt.sizes
        if self._saved == (path, sizes.changes):
            return None
        if self._saved is None and not sizes.changes:
            return None  # nothing learned yet: the file (if any) holds the table
        return path, sizes.snapshot(), sizes.changes

    def _save(self, path: Path, sizes: dict[str, float], changes: int) -> None:
        try:
            save_sizes(path, sizes)
        except OSError as e:
            if self._outage.failed():
                log.warning("answer sizes: cannot write %s: %s (tried again later)", path, e)
            return
        if (failures := self._outage.ok()) is not None:
            log.warning("answer sizes: written again to %s after %d failed writes", path, failures)
        self._saved = (path, changes)

    def done(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        due = self._due()
        if due is not None:
            self._save(*due)


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
