"""Which methods chainproxy serves on a network and transport (pure): the
one answer the allowlist step and ``rpc_methods`` both read, so what
``rpc_methods`` lists is what the allowlist lets through (but for the
``archive_v1`` group's subscriptions over HTTP, listed with their group).

* The legacy methods: the operator's ``proxy.allowlist``; subscriptions only
  on a WebSocket, while ``proxy.websocket.subscriptions`` is on and the
  network has a node-wss endpoint.
* The new spec's families: switched by ``proxy.new_spec`` whatever the
  allowlist says. ``chainHead_v1_*`` lives on a socket (a follow and its
  operations), and ``archive_v1_storage`` / ``archive_v1_storageDiff`` are
  subscriptions in the current spec (``archive_v1_storageEvent`` /
  ``_storageDiffEvent`` notifications): both families need a WebSocket.
* ``rpc_methods``: always (chainproxy's own answer, no node asked). It
  lists the new spec's groups whole ("supporting a group of functions is all
  or nothing", the spec's grouping rule): over HTTP the ``archive_v1`` group
  is listed, as a node lists it, though its two subscriptions are refused
  there with the reason (a WebSocket); ``chainHead_v1``, none of which is
  served over HTTP, is not.
* Writes (``author_*``, ``transaction_v1_*``, ``transactionWatch_v1_*``):
  never listed; the new spec's are refused like ``author_*``.
"""

from __future__ import annotations

from addon.rpc.new_spec import ARCHIVE, CHAIN_HEAD, CHAIN_SPEC, TRANSACTION
from addon.rpc.sub_methods import SUBSCRIBE, UNSUBSCRIBE
from common.config.model import ProxyConfig
from common.config.new_spec import NewSpecConfig

RPC_METHODS = "rpc_methods"
ARCHIVE_STORAGE = "archive_v1_storage"
ARCHIVE_STOP_STORAGE = "archive_v1_stopStorage"
ARCHIVE_STORAGE_DIFF = "archive_v1_storageDiff"
ARCHIVE_STOP_STORAGE_DIFF = "archive_v1_stopStorageDiff"
# subscriptions in the current spec: their notifications need a socket
_WS_ONLY_ARCHIVE = {
    ARCHIVE_STORAGE: "archive_v1_storageEvent",
    ARCHIVE_STOP_STORAGE: "archive_v1_storageEvent",
    ARCHIVE_STORAGE_DIFF: "archive_v1_storageDiffEvent",
    ARCHIVE_STOP_STORAGE_DIFF: "archive_v1_storageDiffEvent",
}

# every new-spec name chainproxy knows -> its family (the proxy.new_spec key)
FAMILY: dict[str, str] = {
    **dict.fromkeys(ARCHIVE, "archive"),
    **dict.fromkeys(CHAIN_SPEC, "chain_spec"),
    **dict.fromkeys(CHAIN_HEAD, "chain_head"),
    **dict.fromkeys(TRANSACTION, "transaction"),
}
_PREFIX = {
    "archive": "archive_v1_*",
    "chain_spec": "chainSpec_v1_*",
    "chain_head": "chainHead_v1_*",
}
WRITE_PREFIXES = ("author_", "transaction_", "transactionwatch_")  # lower-cased
WRITES_REASON = "writes are not served: this is a read-only proxy"
_WS_URL = "open ws:// (or wss://) on this same URL, /rpc/v1/<network>"


def is_write(method: str) -> bool:
    return method.lower().startswith(WRITE_PREFIXES)


def new_spec_refusal(method: str, cfg: NewSpecConfig, *, websocket: bool) -> str | None:
    """Why a new-spec method (a key of ``FAMILY``) is refused on this
    transport, or None when chainproxy serves it."""
    family = FAMILY[method]
    if family == "transaction":
        return WRITES_REASON
    if not getattr(cfg, family):
        return f"{_PREFIX[family]} is switched off on this deployment (proxy.new_spec.{family})"
    if websocket:
        return None
    if family == "chain_head":
        return (
            "chainHead_v1_* needs a WebSocket: a follow subscription and the operations on "
            f"its blocks live on one socket; {_WS_URL}"
        )
    event = _WS_ONLY_ARCHIVE.get(method)
    if event is not None:
        name = method.replace("stopS", "s")  # the operation a stop stops
        return (
            f"{name} is a subscription ({event} notifications) in the current spec: it needs "
            f"a WebSocket; {_WS_URL}"
        )
    return None


def served_methods(proxy: ProxyConfig, *, websocket: bool, node_wss: bool) -> list[str]:
    """What ``rpc_methods`` answers: every method served on this transport
    (``node_wss``: the network has a node-wss endpoint), sorted; never a
    write. A new-spec group is listed whole when any of it is served here
    (its subscriptions over HTTP then answer why they need a WebSocket)."""
    legacy_subs = websocket and node_wss and proxy.websocket.subscriptions
    out = {RPC_METHODS}
    for m in proxy.allowlist:
        if m in FAMILY or is_write(m):
            continue
        if m in SUBSCRIBE or m in UNSUBSCRIBE or "subscribe" in m.lower():
            continue  # listed below, where they are served
        out.add(m)
    if legacy_subs:
        out.update(SUBSCRIBE)
        out.update(UNSUBSCRIBE)
    for family in _PREFIX:
        if family == "chain_head" and not node_wss:
            continue  # a follow stands on the network's node-wss heads
        names = [m for m, f in FAMILY.items() if f == family]
        if any(new_spec_refusal(m, proxy.new_spec, websocket=websocket) is None for m in names):
            out.update(names)  # a group whole, as the spec wants it (and a node lists it)
    return sorted(out)
