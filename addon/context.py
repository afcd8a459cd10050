"""One RPC call's state while it moves through the pipeline, and the
``flow.metadata`` keys the addon's parts use to speak to each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from addon.forward import Attempt, ForwardResult
from addon.jsonrpc import Parsed
from addon.ratelimit import Decision

if TYPE_CHECKING:  # a plan is made by the cache stage; the context only holds it
    from addon.cache_rules import Plan

META_KEY = "chainproxy"  # the summary mitmweb users see (``~meta`` filters, saved flows)
SIDECAR_PATH_KEY = "chainproxy.sidecar_path"  # a non-RPC path for the sidecar
WS_KEY = "chainproxy.websocket"  # on a WebSocket handshake flow: its network
WS_HEADERS_KEY = "chainproxy.ws_headers"  # the handshake's headers its messages carry
WS_CALL_KEY = "chainproxy.ws_call"  # on the internal flow of one WebSocket message


@dataclass(slots=True)
class RpcContext:
    """One RPC flow's state while it moves through the steps."""

    network: str
    started: float
    parsed: Parsed | None = None
    client: str = ""
    websocket: bool = False  # a message of a WebSocket, not a POST
    answers: list[dict[str, Any] | None] = field(default_factory=list)  # per item
    rate: Decision | None = None
    plans: dict[int, Plan] = field(default_factory=dict)  # cacheable items: their entries
    hits: set[int] = field(default_factory=set)  # items answered from the cache
    forwarded: list[int] = field(default_factory=list)  # items sent upstream
    result: ForwardResult | None = None
    error_status: int | None = None  # the HTTP status when the forward failed
    attempts: tuple[Attempt, ...] = ()
    upstream: str | None = None
    provider: str | None = None
    cache: str = "MISS"
    pinned: str | None = None  # the head's hash the hash-optional reads were pinned to
    coalesced: bool = False  # answered by an identical call already in flight
    hedged: bool = False  # a second upstream raced a slow first one

    def pending(self) -> list[int]:
        """Indexes of the items that still need an upstream answer."""
        return [i for i, a in enumerate(self.answers) if a is None]
