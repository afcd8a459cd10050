"""mitmproxy responses as chainproxy builds them: JSON bodies, bytes headers,
the CORS headers every answer carries, built the direct way where the
installed mitmproxy allows it (``internals.response_builder``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from mitmproxy import http
from mitmproxy.net.http import http1

from addon.mitm import internals as mitm_internals
from addon.rpc.jsonrpc import INVALID_REQUEST, Refusal, dumps, error_obj
from addon.rpc.request_ids import new_request_id

CORS_HEADERS = (
    ("Access-Control-Allow-Origin", "*"),
    (
        "Access-Control-Expose-Headers",
        "X-Cache, X-RateLimit-Limit, X-RateLimit-Remaining, "
        "X-RateLimit-Reset, X-RateLimit-Policy, Retry-After, X-Chainproxy-Upstream, "
        "X-Chainproxy-Attempts, X-Chainproxy-Pinned, X-Chainproxy-Coalesced, "
        "X-Chainproxy-Hedged, X-Request-Id, x-metagraph-rpc-endpoint-id, "
        "x-metagraph-rpc-provider, x-metagraph-rpc-attempts, x-metagraph-rpc-cache",
    ),
)


_CORS_FIELDS = tuple((k.encode(), v.encode()) for k, v in CORS_HEADERS)
_JSON_CT = (b"Content-Type", b"application/json")
_build_response = mitm_internals.response_builder()


def json_response(status: int, doc: Any, headers: Iterable[tuple[str, str]] = ()) -> http.Response:
    return _build_response(
        status,
        dumps(doc),
        (_JSON_CT, *((k.encode(), v.encode()) for k, v in headers), *_CORS_FIELDS),
    )


def make_headers(pairs: Iterable[tuple[str, str]]) -> http.Headers:
    """mitmproxy wants bytes; every chainproxy answer also carries CORS headers
    so browser clients (polkadot.js in a page) can read it."""
    return http.Headers((*((k.encode(), v.encode()) for k, v in pairs), *_CORS_FIELDS))


def add_headers(response: http.Response, pairs: Iterable[tuple[str, str]]) -> None:
    """``response.headers[k] = v`` for each pair, with one rebuild of the fields
    instead of one scan and rebuild per header."""
    headers = response.headers
    present = {k.lower() for k, _ in headers.fields}
    new = []
    for k, v in pairs:
        if k.lower().encode() in present:
            headers[k] = v
        else:
            new.append((k.encode(), v.encode()))
    if new:
        headers.fields = (*headers.fields, *new)


def refusal_response(r: Refusal, extra: Iterable[tuple[str, str]] = ()) -> http.Response:
    return json_response(r.status, error_obj(r.id, r.code, r.message, r.data), [*r.headers, *extra])


def wire(response: http.Response) -> bytes:
    """The bytes mitmproxy's HTTP/1 layer sends for ``response`` (head, body)."""
    return bytes(http1.assemble_response(response))


# refusals sent from here (no call exists: the addon never sees them), by
# status, until the metrics take them (``take_refused``)
_REFUSED: Counter[int] = Counter()


def take_refused() -> Counter[int]:
    global _REFUSED
    taken, _REFUSED = _REFUSED, Counter()
    return taken


def json_error(
    status: int, message: str, data: dict[str, Any] | None, code: int = INVALID_REQUEST
) -> bytes:
    """A whole HTTP/1.1 answer: the contract's JSON-RPC error, then a close."""
    if status < 500:  # a refusal (a 5xx is the proxy's own fault, not the client's)
        _REFUSED[status] += 1
    doc = error_obj(None, code, message, data)
    headers = (("Connection", "close"), ("X-Request-Id", new_request_id()))
    return bytes(http1.assemble_response(json_response(status, doc, headers)))
