"""Redis's clock in a Lua script: ``now``, in ms to the microsecond.

Every proxy process of a deployment counts a node's window on this one clock
(``addon/upstream/shared_budgets.py``, ``shared_learned.py``), not on its own.
"""

from __future__ import annotations

# Times are Redis's (TIME) in ms to the microsecond, never cut to a whole ms:
# cut, an end time let the next call in up to 1 ms short of a window after it,
# about the whole gap between a call's end and the next call's arrival at a
# loopback node (it saw 21 calls within 0.9999 s). An end is recorded at the
# microsecond after TIME's (TIME drops the fraction), so a window never closes
# early. An older proxy's whole-ms times on the same Redis still compare.
NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
"""
