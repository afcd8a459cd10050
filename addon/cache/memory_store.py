"""The edge cache's store in memory: the ``CacheStore`` protocol without a
disk, for unit tests of the steps and for tools."""

from __future__ import annotations

from typing import Any


class MemoryStore:
    """For tests and ``proxy.cache.enabled: false`` style fakes."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.fillers: dict[str, str] = {}

    def get(self, key: str) -> Any | None:
        return self.data.get(key)

    def set(self, key: str, value: Any, filler: str | None = None) -> None:
        self.data[key] = value
        if filler is None:
            self.fillers.pop(key, None)
        else:
            self.fillers[key] = filler

    def delete(self, key: str) -> None:
        self.data.pop(key, None)
        self.fillers.pop(key, None)

    def close(self) -> None:
        pass  # nothing waits

    async def purge(self, filler: str) -> int:
        keys = [k for k, f in self.fillers.items() if f == filler]
        for k in keys:
            self.delete(k)
        return len(keys)
