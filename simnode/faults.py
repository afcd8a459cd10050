"""Fault injection: which faults a node has, how a control request changes them
(validated, all or nothing), and what a call meets under them. The HTTP and
the WebSocket handlers both ask ``faulted_answer`` and only turn its answer
into their own transport's terms. ``limit_rps`` is HTTP's alone: the server
asks ``FaultState.admit`` before anything else (a gateway in front of the
node), see ``simnode.server``."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .chain import PRUNING_DEPTH, Chain, is_hash
from .runtime import BASE_SPEC, MAX_SPEC
from .window import WindowLimit

GARBAGE_HTML = (
    "<!DOCTYPE html><html><head><title>Just a moment...</title></head>"
    "<body><h1>Checking your browser before accessing the site.</h1>"
    "<p>simnode garbage fault</p></body></html>"
)


@dataclass(frozen=True, slots=True)
class Faults:
    """Fault state of a node; the default instance means 'healthy'."""

    latency_ms: float = 0.0
    error_rate: float = 0.0
    stall_rate: float = 0.0  # this share of requests waits stall_ms more (a tail)
    stall_ms: float = 2000.0
    # answer time that grows with the bytes answered: this many ms per MiB of the
    # answer's body, waited in one of ``byte_slots`` places per node (heavy answers
    # queue, and the light ones behind them wait too: a shared node melting)
    latency_per_mib_ms: float = 0.0
    byte_slots: int = 1
    http_status: int | None = None
    hang: bool = False
    close: bool = False
    truncate: bool = False
    garbage: bool = False
    lag: int = 0
    freeze: bool = False
    fork: bool = False  # blocks from now on get other hashes (a minority fork)
    # blocks between the best and the finalized one (GRANDPA's usual 2): a longer
    # one keeps a fork unfinalized, so that leaving it is a reorg, not a new chain
    finality_lag: int = 2
    # a node that answers some storage keys wrongly (a quarter of them, by key):
    # what a cross-check of answers at finalized blocks must catch
    wrong_storage: bool = False
    genesis: str | None = None
    die: bool = False
    # HTTP RPC requests beyond ``limit_rps`` calls (a batch counts its calls) in
    # any sliding 1 s window get 429 at once; only admitted calls count. 0: off.
    # ``limit_retry_after_s``: the 429's Retry-After (seconds, rounded up), or
    # none when null
    limit_rps: float = 0.0
    limit_retry_after_s: float | None = None
    # a runtime upgrade: blocks from ``upgrade_at`` on run spec version
    # ``upgrade_spec`` (their runtime version, metadata and runtime API answers
    # change; the blocks before keep theirs). null: no upgrade. Give every
    # replica the same values
    upgrade_at: int | None = None
    upgrade_spec: int = BASE_SPEC + 1
    # state pruning: the node keeps the state of its last ``state_keep`` blocks and
    # answers "State already discarded for <hash>" for state at older ones; null:
    # it keeps every block's (an archive). The node's own (``--state-keep``,
    # ``--archive``) is what a reset goes back to
    state_keep: int | None = PRUNING_DEPTH
    # calls of these methods (HTTP and WebSocket, each item of a batch) are
    # refused with a JSON-RPC error inside a 200, as a node at its own limits
    # answers: ``refuse_code`` and ``refuse_message`` (by default -32004 "RPC work
    # limit exceeded")
    refuse_methods: tuple[str, ...] = ()
    refuse_code: int = -32004
    refuse_message: str = "RPC work limit exceeded"
    # subscriptions push nothing (neither their first value nor any change):
    # the socket stays open, its calls are answered, pings too
    mute: bool = False

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @property
    def slow_path(self) -> bool:
        """Whether any fault needs the slow path of the RPC handler."""
        return bool(
            self.latency_ms
            or self.limit_rps
            or self.latency_per_mib_ms
            or self.error_rate
            or self.stall_rate
            or self.http_status is not None
            or self.hang
            or self.close
            or self.truncate
            or self.garbage
        )


FAULT_KEYS = frozenset(f.name for f in dataclasses.fields(Faults))
_BOOL_KEYS = frozenset(
    {"hang", "close", "truncate", "garbage", "freeze", "fork", "die", "wrong_storage", "mute"}
)


def check_fault(key: str, value: Any) -> Any:
    """Validated value for one control key; raises ValueError with a readable reason."""
    if key not in FAULT_KEYS:
        raise ValueError(f"unknown fault {key!r}; known: {sorted(FAULT_KEYS)}")
    if key in _BOOL_KEYS:
        if not isinstance(value, bool):
            raise ValueError(f"{key} must be a boolean")
        return value
    is_num = isinstance(value, int | float) and not isinstance(value, bool)
    if key in ("latency_ms", "stall_ms", "latency_per_mib_ms"):
        if not is_num or value < 0:
            raise ValueError(f"{key} must be a number >= 0")
        return float(value)
    if key in ("error_rate", "stall_rate"):
        if not is_num or not 0 <= value <= 1:
            raise ValueError(f"{key} must be a number in [0, 1]")
        return float(value)
    if key == "http_status":
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or not 100 <= value <= 599
        ):
            raise ValueError("http_status must be an HTTP status code or null")
        return value
    if key == "limit_rps":
        if not is_num or not (value == 0 or value >= 1):
            raise ValueError("limit_rps must be 0 (off) or a number >= 1")
        return float(value)
    if key == "limit_retry_after_s":
        if value is not None and (not is_num or value < 0):
            raise ValueError("limit_retry_after_s must be a number >= 0 or null")
        return None if value is None else float(value)
    if key == "byte_slots":
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 64:
            raise ValueError("byte_slots must be an integer in [1, 64]")
        return value
    if key == "upgrade_at":
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise ValueError("upgrade_at must be a block number >= 1 or null")
        return value
    if key == "upgrade_spec":
        if (
            not isinstance(value, int)
            or isinstance(value, bool)
            or not BASE_SPEC < value <= MAX_SPEC
        ):
            raise ValueError(f"upgrade_spec must be an integer in ({BASE_SPEC}, {MAX_SPEC}]")
        return value
    if key == "state_keep":
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise ValueError("state_keep must be an integer >= 1 or null")
        return value
    if key == "refuse_methods":
        if not isinstance(value, list | tuple) or not all(isinstance(m, str) for m in value):
            raise ValueError("refuse_methods must be a list of method names")
        return tuple(value)
    if key == "refuse_code":
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError("refuse_code must be an integer")
        return value
    if key == "refuse_message":
        if not isinstance(value, str) or not value:
            raise ValueError("refuse_message must be a non-empty string")
        return value
    if key in ("lag", "finality_lag"):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{key} must be an integer >= 0")
        return value
    # genesis
    if value is not None and not is_hash(value):
        raise ValueError("genesis must be a 0x-prefixed 32-byte hex hash or null")
    return value.lower() if value is not None else None


class FaultState:
    """A node's current faults, and the event hung handlers wait on."""

    def __init__(
        self, rng_seed: int | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.faults = Faults()
        self.slow = False  # cached ``faults.slow_path``: the fast path checks it per call
        # Set while no hang fault is active; hung handlers wait on it.
        self._unhang = asyncio.Event()
        self._unhang.set()
        self._rng = random.Random(rng_seed)
        # the places where an answer's byte time is waited (``byte_slots`` of them)
        self._byte_slots = asyncio.Semaphore(1)
        self._clock = clock
        self._limit = WindowLimit()  # the calls ``limit_rps`` admitted lately

    def apply(self, changes: dict[str, Any], chain: Chain) -> bool:
        """Validate all, then apply all (all-or-nothing). Returns whether to die."""
        checked = {k: check_fault(k, v) for k, v in changes.items()}
        faults = dataclasses.replace(self.faults, **checked)
        chain.set_lag(faults.lag)
        chain.finality_lag = faults.finality_lag
        chain.set_frozen(faults.freeze)
        chain.set_fork(faults.fork)
        chain.wrong_storage = faults.wrong_storage
        chain.set_genesis_override(faults.genesis)
        chain.set_upgrade(faults.upgrade_at, faults.upgrade_spec)
        chain.set_state_keep(faults.state_keep)
        if faults.byte_slots != self.faults.byte_slots:
            # calls already waiting finish on the old places
            self._byte_slots = asyncio.Semaphore(faults.byte_slots)
        if faults.limit_rps != self.faults.limit_rps:
            self._limit.clear()  # a new limit starts with an empty window
        self.faults = faults
        self.slow = faults.slow_path
        if faults.hang:
            self._unhang.clear()
        else:
            self._unhang.set()
        return checked.get("die", False) is True

    def release(self) -> None:
        """On stop: hung handlers wake up (and drop their connection)."""
        self._unhang.set()

    def restart(self) -> None:
        """On a new start: the ``die`` is over, and a hang that stop released holds again."""
        self.faults = dataclasses.replace(self.faults, die=False)
        if self.faults.hang:
            self._unhang.clear()

    async def wait_while_hung(self, stopping: Callable[[], bool]) -> None:
        # Only the calling handler waits; other requests and /_sim/ keep being served.
        while self.faults.hang and not stopping():
            await self._unhang.wait()

    @property
    def byte_slots_full(self) -> bool:
        """Whether every byte slot is held (the next answer would wait)."""
        return self._byte_slots.locked()

    async def wait_bytes(self, nbytes: int) -> None:
        """An answer of ``nbytes`` holds one of the node's byte slots for its time
        (``latency_per_mib_ms``); a call that finds them all taken waits its turn."""
        delay = byte_delay_s(nbytes, self.faults.latency_per_mib_ms)
        async with self._byte_slots:
            await asyncio.sleep(delay)

    def admit(self, calls: int) -> bool:
        """Whether ``limit_rps`` lets an HTTP request of ``calls`` calls through
        now (always, when the fault is off); an admitted request counts."""
        limit = self.faults.limit_rps
        return not limit or self._limit.admit(self._clock(), calls, limit)

    def retry_after(self) -> str | None:
        """The ``Retry-After`` value of a ``limit_rps`` 429, if it has one."""
        s = self.faults.limit_retry_after_s
        return None if s is None else str(math.ceil(s))

    def roll_error(self) -> bool:
        return self._rng.random() < self.faults.error_rate

    def roll(self, rate: float) -> bool:
        return self._rng.random() < rate


MIB = 1 << 20


def byte_delay_s(nbytes: int, per_mib_ms: float) -> float:
    """Seconds an answer of ``nbytes`` takes at ``per_mib_ms`` ms per MiB."""
    if per_mib_ms <= 0 or nbytes <= 0:
        return 0.0
    return nbytes / MIB * per_mib_ms / 1000


# makes the JSON-RPC answer; ``fail()``, when given, says whether one call fails
Respond = Callable[[Callable[[], bool] | None], bytes]


@dataclass(frozen=True, slots=True)
class Answer:
    """What a call gets under the current faults."""

    kind: Literal["stopping", "drop", "status", "garbage", "body"]
    status: int = 0  # for "status"
    body: bytes = b""  # for "body"
    truncate: bool = False  # for "body": send only its first half


async def faulted_answer(
    state: FaultState,
    respond: Respond,
    stopping: Callable[[], bool],
) -> Answer:
    """Wait out a hang and the latency, then apply the faults in force by then
    (an injected error is an internal error of one call of the answer); an
    answer's byte time (``latency_per_mib_ms``) is waited once it is built."""
    await state.wait_while_hung(stopping)
    if stopping():
        return Answer("stopping")
    latency = state.faults.latency_ms
    if state.faults.stall_rate and state.roll(state.faults.stall_rate):
        latency += state.faults.stall_ms
    if latency > 0:
        await asyncio.sleep(latency / 1000)
        if stopping():
            return Answer("stopping")
    f = state.faults  # re-read: faults may have changed while we waited
    if f.close:
        return Answer("drop")
    if f.http_status is not None:
        return Answer("status", status=f.http_status)
    if f.garbage:
        return Answer("garbage")
    fail = state.roll_error if f.error_rate > 0 else None
    body = respond(fail)
    if f.latency_per_mib_ms > 0:
        await state.wait_bytes(len(body))
        if stopping():
            return Answer("stopping")
    return Answer("body", body=body, truncate=f.truncate)
