"""What the simulator's tests share: a clock they move by hand, and requests."""

from __future__ import annotations

from typing import Any

EPOCH = 1_000_000.0


class FakeClock:
    def __init__(self, now: float = EPOCH) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def req(method: str, params: Any = None, rid: Any = 1) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        out["params"] = params
    return out
