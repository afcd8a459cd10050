"""Pure classification of probe outcomes, and secret-free detail text.

Every failure a probe meets ends up here as one of the names in
``sidecar.probing.results``; exception text is never shown (aiohttp puts the request URL,
which may hold an API key, into many of its messages).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import aiohttp

from common.endpoint_id import REDACTED, redact_url
from sidecar.probing.results import (
    ABORTED,
    BAD_RESPONSE,
    DEAD,
    LIVE,
    RATE_LIMITED,
    TIMEOUT,
    UNKNOWN,
)

MAX_DETAIL = 200

_RATE_LIMIT_TEXT = re.compile(r"rate[\s_-]*limit|too\s+many\s+requests|throttl", re.I)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


class ProbeFailure(Exception):
    """Raised inside a probe to end it with this classification and detail."""

    def __init__(self, classification: str, detail: str) -> None:
        super().__init__(classification, detail)
        self.classification = classification
        self.detail = detail


def classify_status(status: int) -> str:
    """HTTP status -> classification; 1xx-3xx are not failures here (callers decide)."""
    if status == 429:
        return RATE_LIMITED
    if status >= 400:
        return f"http-{status}"
    return LIVE


def raise_for_status(status: int) -> None:
    """A 429 or 4xx/5xx answer is the probe's verdict: raise it (``HTTP <status>``)."""
    cls = classify_status(status)
    if cls != LIVE:
        raise ProbeFailure(cls, f"HTTP {status}")


def is_rate_limit_message(text: str) -> bool:
    return bool(_RATE_LIMIT_TEXT.search(text))


def classify_rpc_error(error: Any) -> str:
    """A JSON-RPC error object -> rate-limited or bad-response.

    Real nodes and gateways differ: ``code`` may be missing, the message is free text.
    """
    if isinstance(error, Mapping):
        message = error.get("message")
        code = error.get("code")
        if isinstance(message, str) and is_rate_limit_message(message):
            return RATE_LIMITED
        if code == 429:  # some gateways mirror the HTTP status as the error code
            return RATE_LIMITED
    return BAD_RESPONSE


def describe_rpc_error(error: Any) -> str:
    """Short text for a JSON-RPC error object (scrub it before showing)."""
    if not isinstance(error, Mapping):
        return "malformed error object"
    code = error.get("code")
    message = error.get("message")
    text = message[:80] if isinstance(message, str) else "no message"
    if isinstance(code, int) and not isinstance(code, bool):
        return f"error {code}: {text}"
    return f"error: {text}"


def classify_exception(exc: BaseException) -> str:
    """An exception met while probing -> classification. Order matters: several
    aiohttp errors have more than one base (e.g. ServerTimeoutError is a
    connection error and a TimeoutError)."""
    if isinstance(exc, ProbeFailure):
        return exc.classification
    if isinstance(exc, TimeoutError):
        return TIMEOUT
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
        return ABORTED
    if isinstance(exc, aiohttp.ClientResponseError):  # incl. a refused WebSocket upgrade
        cls = classify_status(exc.status)
        return BAD_RESPONSE if cls == LIVE else cls
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, DNS, TLS
        return DEAD
    if isinstance(exc, ConnectionError | aiohttp.ClientOSError):  # reset, broken pipe
        return DEAD
    if isinstance(exc, aiohttp.ClientConnectionError):  # "Connection closed" mid-answer
        return ABORTED
    if isinstance(exc, OSError):
        return DEAD
    if isinstance(exc, ValueError | aiohttp.ClientError):  # bad JSON, bad redirect, ...
        return BAD_RESPONSE
    return UNKNOWN  # a bug in the probe, not a verdict on the endpoint


def describe_exception(exc: BaseException) -> str:
    """Fixed, secret-free text for an exception (never ``str(exc)``)."""
    if isinstance(exc, ProbeFailure):
        return exc.detail
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server closed the connection before answering"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "answer body cut off"
    if isinstance(exc, aiohttp.WSServerHandshakeError):
        return f"WebSocket upgrade refused: HTTP {exc.status}"
    if isinstance(exc, aiohttp.TooManyRedirects):
        return "too many redirects"
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"HTTP {exc.status}"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "DNS lookup failed"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
        return "TLS handshake failed"
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, ConnectionRefusedError):
            return "connection refused"
        return f"cannot connect ({type(exc.os_error).__name__})"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, aiohttp.ClientConnectionError):
        return "connection closed mid-answer"
    if isinstance(exc, OSError):
        return f"connection error ({type(exc).__name__})"
    if isinstance(exc, ValueError):
        return "malformed answer"
    return f"probe error ({type(exc).__name__})"


def url_secrets(url: str) -> list[str]:
    """Parts of ``url`` that are credentials: userinfo, plus the query values, bare
    query keys and path segments that ``redact_url`` hides (the project's one
    notion of a secret in a URL). Parts under 3 characters are skipped so that
    scrubbing never mangles ordinary text."""
    try:
        parts = urlsplit(url)
        redacted = urlsplit(redact_url(url))
        candidates = [parts.username, parts.password]
    except ValueError:
        return []
    original_q = parse_qsl(parts.query, keep_blank_values=True)
    redacted_q = parse_qsl(redacted.query, keep_blank_values=True)
    for (key, value), (r_key, r_value) in zip(original_q, redacted_q, strict=False):
        if r_key == REDACTED:
            candidates.append(key)
        if r_value == REDACTED:
            candidates.append(value)
    segments = zip(parts.path.split("/"), redacted.path.split("/"), strict=False)
    candidates.extend(seg for seg, r_seg in segments if r_seg == REDACTED)
    out: set[str] = set()
    for c in candidates:
        if c and len(c) >= 3:
            out.update({c, unquote(c)})
    return sorted(out, key=len, reverse=True)  # longest first: no partial leftovers


def safe_detail(text: str, url: str) -> str:
    """Detail text fit to show: one line, bounded, with anything from the URL that
    could be a secret replaced (servers sometimes echo an API key in an error)."""
    for secret in url_secrets(url):
        text = text.replace(secret, "***")
    text = _CONTROL.sub(" ", text).strip()
    if len(text) > MAX_DETAIL:
        text = text[: MAX_DETAIL - 1] + "…"
    return text
