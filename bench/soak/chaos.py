"""Carries out the chaos schedule against the stack: each action starts at its
time and is undone after its duration (a node healed or restarted, the
sidecar, Redis or a proxy started again). A reload runs to its end at its
start (``chainproxy reload``: both proxies replaced one at a time); after one
with a changed rate limit, a call checks that the new limit is in force (a
call of the tally's like any other). Blocking process work runs in a thread
so the clients' loop never waits for it."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field

import aiohttp

from bench.soak.plan import LIMIT_FAULTS, NODE_FAULTS, Action
from bench.soak.stack import QUOTA, RELOAD_QUOTA, SoakStack
from bench.soak.tally import Call, Tally, judge_item

log = logging.getLogger("soak.chaos")


@dataclass
class Chaos:
    stack: SoakStack
    started: float  # monotonic time the traffic started
    tally: Tally | None = None  # where the check after a reload records its call
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
            if a.kind == "reload":
                await self._limit_in_force(self.stack.quota)
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
        elif a.kind in ("rolling", "reload"):
            quota = None
            if a.kind == "reload":
                quota = RELOAD_QUOTA if s.quota == QUOTA else QUOTA
            before = [c.pid for c in s.proxies]
            t0 = time.monotonic()
            state = s.reload(quota)
            took = time.monotonic() - t0
            if state != "done":
                raise RuntimeError(f"reload {state} (see the launcher lines above)")
            limit = f", rate limit {quota}" if quota else ""
            after = [c.pid for c in s.proxies]
            self._note(f"{a.kind}: proxies {before} -> {after} in {took:.1f}s{limit}")
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
        elif a.kind in ("rolling", "reload"):
            return  # done at its start
        self._note(f"{a.kind} {a.target} over")

    async def _limit_in_force(self, quota: int) -> None:
        """One call from an address of its own: its X-RateLimit-Limit is the new one."""
        body = {"jsonrpc": "2.0", "id": 1, "method": "system_health", "params": []}
        connector = aiohttp.TCPConnector(local_addr=("127.0.0.98", 0))
        t, t0 = time.monotonic() - self.started, time.monotonic()
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.post(
                f"{self.stack.url}/rpc/v1/finney",
                json=body,
                timeout=aiohttp.ClientTimeout(total=30),
            ) as r,
        ):
            limit = r.headers.get("X-RateLimit-Limit")
            doc = json.loads(await r.read())
        outcome, recorded, detail = judge_item(doc, expect_refusal=False)
        if self.tally is not None:
            ms = (time.monotonic() - t0) * 1000
            self.tally.add(Call(t, "http", "system_health", outcome, ms, recorded, detail))
        if limit != str(quota):
            raise RuntimeError(f"after the reload X-RateLimit-Limit is {limit}, not {quota}")
        self._note(f"reload: X-RateLimit-Limit {limit} in force")
