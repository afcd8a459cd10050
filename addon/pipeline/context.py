"""One RPC call's state while it moves through the pipeline, how it ends
(``Reply``), and the ``flow.metadata`` keys the addon's parts use to speak to
each other.

A call comes from an HTTP POST or from one WebSocket message; the steps never
see which beyond ``socket`` (the client's socket, for subscriptions) and
``origin`` (anything with ``live``: the flow, or the socket), and they end a
call by setting ``reply``. ``addon/pipeline/reply.py`` turns a reply into an HTTP
response or a WebSocket message, in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from addon.quota.local import Decision
from addon.rpc.attempt import Attempt
from addon.rpc.jsonrpc import Call, Parsed, Refusal, error_obj
from addon.upstream.forward import ForwardResult

if TYPE_CHECKING:  # a plan is made by the cache stage; the context only holds it
    from addon.cache.rules import Plan

META_KEY = "chainproxy"  # the summary mitmweb users see (``~meta`` filters, saved flows)
SIDECAR_PATH_KEY = "chainproxy.sidecar_path"  # a non-RPC path for the sidecar
WS_KEY = "chainproxy.websocket"  # on a WebSocket handshake flow: its network
WS_HEADERS_KEY = "chainproxy.ws_headers"  # the handshake's facts its messages carry


class Origin(Protocol):
    """Where a call came from: only asked whether its client is still there."""

    @property
    def live(self) -> bool: ...


class Socket(Protocol):
    """A client's WebSocket, as the subscription steps see it."""

    network: str
    client: str
    tier: str | None
    subscriptions: dict[str, str]  # client subscription id -> method as called

    def send(self, body: bytes) -> None: ...

    def changed(self) -> None: ...


@dataclass(slots=True)
class Reply:
    """How a call ended: the HTTP status a POST gets (a WebSocket message
    carries only ``doc``), the body, extra headers, and the outcome the live
    metrics and mitmweb show (``ok``, ``error``, ``refused``)."""

    status: int
    doc: Any
    outcome: str
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def refusal(cls, r: Refusal) -> Reply:
        return cls(r.status, error_obj(r.id, r.code, r.message, r.data), "refused", r.headers)


@dataclass(slots=True)
class RpcContext:
    """One RPC call's (or batch's) state while it moves through the steps."""

    network: str
    started: float
    origin: Origin
    client: str = ""  # whom the quota charges: an address, or ``key:<tier>:<digest>``
    address: str = ""  # the client's address (after the trusted X-Forwarded-For rules)
    request_id: str = ""  # X-Request-Id: the client's if sane, else made here
    units: int = 0  # quota units charged
    item_units: dict[int, int] | None = None  # ... per item (the access log; None: none)
    tier: str | None = None  # the client's tier (None: the default quota)
    socket: Socket | None = None  # the client's WebSocket; None for a POST
    parsed: Parsed | None = None
    answers: list[dict[str, Any] | None] = field(default_factory=list)  # per item
    reply: Reply | None = None  # set once: the call is answered
    rate: Decision | None = None
    reserved: dict[int, int] | None = None  # item -> byte units taken before it was sent
    plans: dict[int, Plan] = field(default_factory=dict)  # cacheable items: their entries
    hits: set[int] = field(default_factory=set)  # items answered from the cache
    forwarded: list[int] = field(default_factory=list)  # items sent upstream
    subscribed: dict[int, str | None] = field(default_factory=dict)  # item -> its upstream
    afters: list[Callable[[], None]] | None = None  # run once the answer is sent
    result: ForwardResult | None = None
    error_status: int | None = None  # the HTTP status when the forward failed
    attempts: tuple[Attempt, ...] = ()
    upstream: str | None = None
    provider: str | None = None
    cache: str = "MISS"
    pinned: str | None = None  # the head's hash the hash-optional reads were pinned to
    unpinned: dict[int, Call] | None = None  # ... and those reads as the client sent them
    pin_missed: bool = False  # a node did not know that hash: sent again unpinned
    background: bool = False  # the proxy's own read (pre-warm): never waits for budget
    min_block: int | None = None  # ... and its height: only nodes that have it answer
    coalesced: bool = False  # answered by an identical call already in flight
    hedged: bool = False  # a second upstream raced a slow first one
    elapsed_s: float | None = None  # from arrival to its answer, taken once

    def stop(self, now: float) -> float:
        """The call's latency: measured the first time it is asked (when its
        answer is ready), the same figure for usage, metrics and mitmweb."""
        if self.elapsed_s is None:
            self.elapsed_s = now - self.started
        return self.elapsed_s

    @property
    def websocket(self) -> bool:
        return self.socket is not None

    @property
    def failover(self) -> bool:
        """More than one upstream was tried for this call."""
        return len(self.attempts) > 1

    def pending(self) -> list[int]:
        """Indexes of the items that still need an answer."""
        return [i for i, a in enumerate(self.answers) if a is None]

    def charged(self, units: dict[int, int]) -> None:
        """``units`` (per item) were taken from the client."""
        self.units += sum(units.values())
        if self.item_units is None:
            self.item_units = dict(units)  # (``units`` may be ``reserved``: kept apart)
            return
        for i, n in units.items():
            self.item_units[i] = self.item_units.get(i, 0) + n

    def refuse(self, status: int, doc: Any, headers: tuple[tuple[str, str], ...] = ()) -> None:
        """End the call with a policy refusal."""
        self.reply = Reply(status, doc, "refused", headers)
