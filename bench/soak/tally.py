"""What the clients saw, judged. Pure: the traffic module feeds it, the
report reads it.

A call is one JSON-RPC call (a batch of five is five). Its outcome is one of:

* ``ok``: a result, or an error of the node's (a JSON-RPC error from upstream
  is the node's answer: the proxy passed it on);
* ``refused``: a refusal the client asked for (off-allowlist method, over
  quota): the contract's answer, not an error;
* ``error``: anything else a client would call a failure (no answer, a
  timeout, a 5xx, a proxy error, a socket closed under it).

Calls that leave a usage record are those answered from the cache or
upstream (``addon/steps/record.py``: refusals are not proxied calls): ``ok``, and
``error`` answers that came from the proxy's forwarding (a 502/504 body).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

REFUSAL_CODES = {-32601, -32005}  # allowlist, rate limit (the wire contract)
# the proxy's own answers after forwarding failed: still a usage record
FORWARD_FAILURE_CODES = {-32603}


@dataclass(slots=True)
class Call:
    t: float  # seconds since the traffic started
    kind: str  # http, batch, ws, subscribe
    method: str
    outcome: str  # ok, refused, error
    latency_ms: float
    recorded: bool  # whether the proxy should have a usage record of it
    detail: str = ""


def judge_item(item: Any, *, expect_refusal: bool) -> tuple[str, bool, str]:
    """(outcome, recorded, detail) of one JSON-RPC answer object."""
    if not isinstance(item, dict):
        return "error", False, f"not a JSON-RPC answer: {str(item)[:80]}"
    err = item.get("error")
    if err is None:
        if "result" not in item:
            return "error", False, "answer without result or error"
        if expect_refusal:
            return "error", True, "a call that must be refused was answered"
        return "ok", True, ""
    code = err.get("code") if isinstance(err, dict) else None
    message = str(err.get("message", ""))[:120] if isinstance(err, dict) else str(err)[:120]
    if code in REFUSAL_CODES:
        if code == -32601 and not expect_refusal:
            return "error", False, f"refused: {message}"
        return "refused", False, ""
    if code in FORWARD_FAILURE_CODES or code is None:
        return "error", True, f"{code}: {message}"
    return "ok", True, ""  # the node's own error, passed on


@dataclass(slots=True)
class HeadLog:
    """The heads one subscription delivered: gaps, duplicates, reorgs."""

    numbers: dict[int, str] = field(default_factory=dict)  # number -> hash delivered
    last: int | None = None
    gaps: int = 0  # blocks skipped
    duplicates: int = 0  # a number again with the same hash
    reorgs: int = 0  # a number again with another hash (a node would do the same)
    unlinked: int = 0  # the next number, but its parent is not the head delivered before
    delivered: int = 0
    longest_silence_s: float = 0.0
    _last_t: float | None = None

    def add(self, t: float, number: int, block_hash: str, parent: str = "") -> None:
        self.delivered += 1
        if self._last_t is not None:
            self.longest_silence_s = max(self.longest_silence_s, t - self._last_t)
        self._last_t = t
        if self.last is not None:
            if number == self.last + 1 and parent and parent != self.numbers.get(self.last):
                self.unlinked += 1  # another fork's head: a switch without a reorg
            elif number > self.last + 1:
                self.gaps += number - self.last - 1
            elif number <= self.last:
                if self.numbers.get(number) == block_hash:
                    self.duplicates += 1
                else:
                    self.reorgs += 1
        self.numbers[number] = block_hash
        self.last = number
        if len(self.numbers) > 4096:  # bounded: old numbers never come back
            for n in sorted(self.numbers)[:1024]:
                del self.numbers[n]


@dataclass
class Tally:
    calls: list[Call] = field(default_factory=list)
    heads: dict[str, HeadLog] = field(default_factory=dict)  # "<socket>/<sub id>" -> log
    sockets_closed: list[tuple[float, str]] = field(default_factory=list)
    other_notifications: int = 0

    def add(self, call: Call) -> None:
        self.calls.append(call)

    def head(self, key: str) -> HeadLog:
        log = self.heads.get(key)
        if log is None:
            log = self.heads[key] = HeadLog()
        return log

    # --- figures -----------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for c in self.calls:
            out[c.outcome] += 1
        out["sent"] = len(self.calls)
        out["answered"] = out["ok"] + out["refused"]
        out["recorded"] = sum(1 for c in self.calls if c.recorded)
        return dict(out)

    def errors(self) -> list[Call]:
        return [c for c in self.calls if c.outcome == "error"]

    def minute_p99(self) -> list[tuple[int, float, int]]:
        """(minute, p99 latency ms, calls) for each minute of answered calls."""
        by_minute: dict[int, list[float]] = defaultdict(list)
        for c in self.calls:
            if c.outcome != "error":
                by_minute[int(c.t // 60)].append(c.latency_ms)
        return [(m, percentile(v, 0.99), len(v)) for m, v in sorted(by_minute.items())]

    def head_figures(self) -> dict[str, Any]:
        logs = list(self.heads.values())
        return {
            "subscriptions": len(logs),
            "delivered": sum(h.delivered for h in logs),
            "with_gap": sum(1 for h in logs if h.gaps),
            "with_duplicate": sum(1 for h in logs if h.duplicates),
            "blocks_missed": sum(h.gaps for h in logs),
            "duplicates": sum(h.duplicates for h in logs),
            "reorgs": sum(h.reorgs for h in logs),
            "unlinked": sum(h.unlinked for h in logs),
            "longest_silence_s": max((h.longest_silence_s for h in logs), default=0.0),
        }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]
