"""What the simulator's tests share: where their clocks start, and requests."""

from __future__ import annotations

from typing import Any

EPOCH = 1_000_000.0


def req(method: str, params: Any = None, rid: Any = 1) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        out["params"] = params
    return out
