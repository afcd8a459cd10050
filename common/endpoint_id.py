"""Stable endpoint ids and secret-free URLs.

An endpoint's id is derived from its URL with any secret removed first, so
rotating an API key keeps the id, and ids (unlike URLs) are safe to show.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

ID_PREFIX = "endpoint-srf-"
REDACTED = "***"

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
# Query parameters that carry credentials at the public RPC providers.
_SECRET_QUERY = re.compile(
    r"(api[-_]?key|apikey|key|token|access[-_]?token|secret|auth|password|pass|sig)$", re.I
)
# A path segment that looks like a credential: long and random-looking (hex, uuid, base64url).
_SECRET_SEGMENT = re.compile(r"^(?=.*\d)(?=.*[A-Za-z])[A-Za-z0-9_\-]{20,}$|^[0-9a-fA-F]{24,}$")


def _is_secret_segment(segment: str) -> bool:
    return bool(_SECRET_SEGMENT.match(segment))


def _redact_param(key: str, value: str) -> tuple[str, str]:
    if _SECRET_QUERY.search(key):
        return key, REDACTED
    if not value and _is_secret_segment(key):  # a bare key: "?<api-key>"
        return REDACTED, ""
    return key, REDACTED if _is_secret_segment(value) else value


def redact_url(url: str, *, keep_default_port: bool = False) -> str:
    """The URL normalised (lowercase scheme and host, no default port, no trailing
    slash) with userinfo dropped and secret-looking path segments and query values
    replaced by ``***``."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    port = parts.port
    if port is not None and port == _DEFAULT_PORTS.get(scheme) and not keep_default_port:
        port = None
    netloc = host if port is None else f"{host}:{port}"
    segments = [REDACTED if _is_secret_segment(s) else s for s in parts.path.split("/")]
    path = "/".join(segments).rstrip("/")
    query = urlencode(
        [_redact_param(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)],
        safe="*",
    )
    return urlunsplit((scheme, netloc, path, query, ""))


def endpoint_id(url: str) -> str:
    """``endpoint-srf-`` + 16 lowercase hex of the redacted, normalised URL."""
    digest = hashlib.sha256(redact_url(url).encode()).hexdigest()
    return ID_PREFIX + digest[:16]
