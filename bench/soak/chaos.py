"""Carries out the chaos schedule against the stack: each action starts at its
time and is undone after its duration (a node healed or restarted, the
sidecar, Redis or a proxy started again). Blocking process work runs in a
thread so the clients' loop never waits for it."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from bench.soak.plan import LIMIT_FAULTS, NODE_FAULTS, Action
from bench.soak.stack import SoakStack

log = logging.getLogger("soak.chaos")


@dataclass
class Chaos:
    stack: SoakStack
    started: float  # monotonic time the traffic started
    events: list[tuple[float, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    upstream_429: int = 0  # 429s the rate-limited nodes answered (LIMIT_FAULTS)

    def _note(self, text: str) -> None:
        t = time.monotonic() - self.started
        self.events.append((round(t, 1), text))
        log.info("%7.1fs %s", t, text)

    async def run(self, actions: list[Action]) -> None:
        await asyncio.gather(*(self._one(a) for a in actions))

    async def _one(self, a: Action) -> None:
        await asyncio.sleep(max(0.0, self.started + a.at - time.monotonic()))
        try:
            await asyncio.to_thread(self._begin, a)
            await asyncio.sleep(max(0.0, self.started + a.until - time.monotonic()))
            await asyncio.to_thread(self._end, a)
        except Exception as e:  # a failed restart is a finding, not the soak's end
            self.failures.append(f"{a.kind} {a.target}: {e!r}"[:300])
            self._note(f"FAILED {a.kind} {a.target}: {e!r}"[:200])

    def _begin(self, a: Action) -> None:
        s = self.stack
        if a.kind == "kill":
            s.kill_node(a.target)
        elif a.kind in NODE_FAULTS:
            s.node_fault(a.target, NODE_FAULTS[a.kind])
        elif a.kind == "sidecar":
            s.kill_sidecar()
        elif a.kind == "redis":
            s.kill_redis()
        elif a.kind == "proxy":
            code = s.stop_proxy(1)
            self._note(f"proxy-2 stopped by SIGTERM (exit code {code})")
            return
        self._note(f"{a.kind} {a.target} for {a.duration:.0f}s")

    def _end(self, a: Action) -> None:
        s = self.stack
        if a.kind == "kill":
            s.restart_node(a.target)
        elif a.kind in LIMIT_FAULTS:
            n = s.node_rate_limited(a.target)  # before the heal clears it
            s.node_heal(a.target)
            self.upstream_429 += n
            self._note(f"{a.kind} {a.target} over ({n} x 429)")
            return
        elif a.kind in NODE_FAULTS:
            s.node_heal(a.target)
        elif a.kind == "sidecar":
            s.restart_sidecar()
        elif a.kind == "redis":
            s.restart_redis()
        elif a.kind == "proxy":
            s.start_proxy(1)
        self._note(f"{a.kind} {a.target} over")
