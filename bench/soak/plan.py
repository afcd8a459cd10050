"""The chaos schedule: what fails, when, for how long. Pure and seeded.

One rule keeps the figure meaningful: at any moment at least one node is
untouched, so every client-visible error counts against the proxy ("errors
while a healthy upstream existed", goal 0).

The reloads (``RELOAD_ACTIONS``: a rolling restart of both proxies, and a
reload with a changed rate limit, what ``chainproxy reload`` does) are
planned in a second pass with a random stream of their own, so a seed's other
actions stay what they were; they never overlap a proxy restart, each other,
or (a reload signals the sidecar) a sidecar restart."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

# Faults a simulated node takes at run time (``/_sim/control``), by action name.
NODE_FAULTS: dict[str, dict[str, Any]] = {
    "stall": {"stall_rate": 0.3, "stall_ms": 3000.0},  # a long tail
    "lag": {"lag": 40},  # far behind the others
    "garbage": {"garbage": True},  # an HTML page instead of JSON
    "errors": {"error_rate": 0.6},  # internal errors on most calls
    "freeze": {"freeze": True},  # the head stops (a stuck node)
    "fork": {"fork": True},  # a minority fork from now on
    "hang": {"hang": True},  # accepts, never answers
    # a rate-limited node: 429 beyond 3 HTTP calls a second, bare (the proxy
    # learns a budget) or with Retry-After: 2 (the proxy pauses the node)
    "rate_limit": {"limit_rps": 3},
    "retry_after": {"limit_rps": 3, "limit_retry_after_s": 2},
}
LIMIT_FAULTS = frozenset(k for k, v in NODE_FAULTS.items() if "limit_rps" in v)
NODE_ACTIONS = ("kill", *NODE_FAULTS)
STACK_ACTIONS = ("sidecar", "proxy", "redis")  # restarts
# chainproxy reload, as the launcher does it: every proxy replaced one at a
# time ("rolling": the config unchanged, as after a `git pull`), or the same
# after the rate limit in the config was changed ("reload")
RELOAD_ACTIONS = ("rolling", "reload")
RELOAD_S = 20.0  # the time a reload is given: two proxies started and drained in turn
RELOAD_GAP_S = (25.0, 50.0)  # between one reload and the next


@dataclass(frozen=True, slots=True)
class Action:
    at: float  # seconds after the traffic started
    kind: str  # a NODE_ACTIONS, STACK_ACTIONS or RELOAD_ACTIONS name
    target: str  # node name, or the stack part
    duration: float  # how long the fault (or the outage) lasts

    @property
    def until(self) -> float:
        return self.at + self.duration


def schedule(
    seconds: float,
    nodes: list[str],
    *,
    seed: int,
    mean_gap_s: float = 6.0,
    warmup_s: float = 15.0,
    redis: bool = True,
) -> list[Action]:
    """Actions at random intervals from ``warmup_s`` until ``seconds`` minus a
    quiet end (faults are over before the last figures are read). Never more
    than ``len(nodes) - 1`` nodes faulted at once; stack restarts of one kind
    never overlap."""
    rng = random.Random(seed)
    kinds = [*NODE_ACTIONS, *STACK_ACTIONS] if redis else [*NODE_ACTIONS, "sidecar", "proxy"]
    weights = [3 if k in NODE_ACTIONS else 1 for k in kinds]
    end = seconds - max(10.0, seconds * 0.1)
    busy: dict[str, float] = {}  # target -> until
    out: list[Action] = []
    t = warmup_s
    while True:
        t += rng.uniform(0.5 * mean_gap_s, 1.5 * mean_gap_s)
        kind = rng.choices(kinds, weights)[0]
        duration = rng.uniform(4.0, 20.0) if kind in NODE_ACTIONS else rng.uniform(1.0, 6.0)
        if t + duration > end:
            break
        if kind in NODE_ACTIONS:
            free = [n for n in nodes if busy.get(n, 0.0) < t]
            faulted = len(nodes) - len(free)
            if not free or faulted >= len(nodes) - 1:
                continue
            target = rng.choice(free)
        else:
            target = kind
            if busy.get(target, 0.0) >= t:
                continue
        busy[target] = t + duration + 2.0  # and a moment to recover
        out.append(Action(round(t, 3), kind, target, round(duration, 3)))
    reloads = _reloads(out, warmup_s, end, random.Random(f"{seed}/reloads"))
    return sorted(out + reloads, key=lambda a: a.at)


def _reloads(planned: list[Action], start: float, end: float, rng: random.Random) -> list[Action]:
    """Rolling restarts and reloads in turn, each where no proxy or sidecar
    restart is planned within it (2 s either side)."""
    blocking = [a for a in planned if a.kind in ("proxy", "sidecar")]
    out: list[Action] = []
    t = start + rng.uniform(*RELOAD_GAP_S) / 2
    while t + RELOAD_S <= end:
        clash = [a for a in blocking if a.at - 2 < t + RELOAD_S and t < a.until + 2]
        if clash:
            t = max(a.until for a in clash) + 2.5  # just after it (and its 2 s)
            continue
        kind = RELOAD_ACTIONS[len(out) % len(RELOAD_ACTIONS)]
        out.append(Action(round(t, 3), kind, "proxies", RELOAD_S))
        t += RELOAD_S + rng.uniform(*RELOAD_GAP_S)
    return out


SMOKE_S = 32.0  # tests/e2e/test_soak_smoke.py: the soak's length


def smoke_plan(nodes: list[str]) -> list[Action]:
    """The smoke test's chaos, packed into ``SMOKE_S`` seconds: one of each kind
    the soak's goals rest on (a proxy stopped by SIGTERM and started again,
    Redis and the sidecar killed and restarted, a node rate-limited to 3 calls
    a second and, while it is limited, another killed: the first node stays
    whole), all over ~12 s before the end, as ``schedule`` keeps a quiet end."""
    first, second, third = nodes[:3]
    del first  # untouched throughout
    return [
        Action(4.0, "proxy", "proxy", 2.0),
        Action(7.0, "redis", "redis", 3.0),
        Action(9.0, "rate_limit", third, 8.0),
        Action(11.0, "kill", second, 5.0),
        Action(18.0, "sidecar", "sidecar", 1.6),
    ]


def faulted_at(actions: list[Action], t: float, nodes: list[str]) -> set[str]:
    """The nodes under a fault at time ``t``."""
    return {a.target for a in actions if a.target in nodes and a.at <= t < a.until}
