"""Which way a request goes, from its method and path alone (pure).

Only ``POST /rpc/v1/<network>`` is an RPC call; ``GET /rpc/healthz`` is the
proxy's own liveness. Everything else under ``/rpc/`` is a JSON-RPC 404, the
sidecar's internal API is never reachable through the proxy, and every other
path is passed to the sidecar under its normalised form (so
``/api/v1/%69nternal`` or ``/x/../api/v1/internal`` cannot sneak past the
check).

A path's bytes need not be UTF-8: mitmproxy hands over what is not as lone
surrogates (``\udcff`` for ``0xff``). Those are percent-encoded back to their
bytes wherever the path is shown or passed on, so any byte sequence gets a
defined answer (a 404 under ``/rpc/``, the sidecar's answer elsewhere).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from urllib.parse import quote, unquote

from addon.rpc.jsonrpc import INVALID_REQUEST, METHOD_NOT_FOUND, Refusal

RPC_VERSION = "v1"
INTERNAL_PREFIX = "/api/v1/internal"
HEALTH_PATH = "/rpc/healthz"  # the proxy's own liveness, for a load balancer's checks
_PATH_SAFE = "/-._~!$&'()*+,;=:@"


@dataclass(frozen=True, slots=True)
class RpcRoute:
    network: str


@dataclass(frozen=True, slots=True)
class Preflight:
    """A CORS preflight for an RPC path: answered by the proxy itself."""


@dataclass(frozen=True, slots=True)
class ProxyHealth:
    """``GET /rpc/healthz``: this proxy process answers, whatever the sidecar
    does (``/healthz`` is the sidecar's, a 502 while it is down)."""


@dataclass(frozen=True, slots=True)
class SidecarRoute:
    path: str  # normalised path plus the original query string


Route = RpcRoute | Preflight | ProxyHealth | SidecarRoute | Refusal


def normalise_path(raw_path: str) -> tuple[str, str]:
    """(normalised path, query). The path is percent-decoded until it stops
    changing (so ``%2569`` cannot survive one decode as ``%69``) and then
    normalised, so encoded dots and slashes are resolved too."""
    path, _, query = raw_path.partition("?")
    decoded = path
    while (step := unquote(decoded, errors="replace")) != decoded:
        decoded = step
    norm = posixpath.normpath("/" + decoded.lstrip("/"))
    if norm.startswith("//"):  # posixpath keeps a leading double slash
        norm = "/" + norm.lstrip("/")
    return norm, query


def classify(method: str, raw_path: str, networks: tuple[str, ...]) -> Route:
    path, query = normalise_path(raw_path)
    if path == HEALTH_PATH:
        if method in ("GET", "HEAD"):
            return ProxyHealth()
        return Refusal(
            405,
            INVALID_REQUEST,
            f"method {method} not allowed here",
            headers=(("Allow", "GET, HEAD"),),
        )
    if path == "/rpc" or path.startswith("/rpc/"):
        parts = path.split("/")[2:]  # after "", "rpc"
        if len(parts) != 2 or parts[0] != RPC_VERSION or parts[1] not in networks:
            known = ", ".join(f"/rpc/{RPC_VERSION}/{n}" for n in networks)
            return Refusal(
                404, METHOD_NOT_FOUND, f"unknown network or version: {_encoded(path)} (try {known})"
            )
        if method == "OPTIONS":
            return Preflight()
        if method != "POST":
            return Refusal(
                405,
                INVALID_REQUEST,
                # a GET here is often a WebSocket handshake that did not take
                # (a bad Sec-WebSocket-Key or version): say both ways in
                f"method {method} not allowed: JSON-RPC calls are HTTP POST, or a "
                "WebSocket upgrade (GET with Upgrade: websocket and a valid handshake)",
                headers=(("Allow", "POST"),),
            )
        return RpcRoute(parts[1])
    if path == INTERNAL_PREFIX or path.startswith(INTERNAL_PREFIX + "/"):
        return Refusal(404, METHOD_NOT_FOUND, "not found")
    # Re-encoded exactly once: the sidecar's single decode sees the checked path,
    # with the trailing slash it came with (the sidecar's routes tell them apart)
    if path != "/" and raw_path.partition("?")[0].endswith("/"):
        path += "/"
    return SidecarRoute(_encoded(path) + (f"?{_ascii(query)}" if query else ""))


def _encoded(path: str) -> str:
    """The path percent-encoded, bytes that were not UTF-8 as they came."""
    return quote(path, safe=_PATH_SAFE, errors="surrogateescape")


def _ascii(query: str) -> str:
    """The query as sent, with only what is not printable ASCII percent-encoded
    (its own escapes stay as the client wrote them)."""
    if query.isascii() and query.isprintable():
        return query
    raw = query.encode("utf-8", "surrogateescape")
    return "".join(chr(b) if 0x20 < b < 0x7F else f"%{b:02X}" for b in raw)
