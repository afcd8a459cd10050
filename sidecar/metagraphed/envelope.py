"""Metagraphed's envelopes and the headers its clients rely on (pure).

From Metagraphed's ``workers/responses.ts`` and ``workers/http.ts``:

* success: ``{"ok": true, "schema_version": 1, "data": …, "meta": {"contract_version", …}}``
  with a weak ETag (``W/"<32 hex of the body's SHA-256>"``, here without
  the ``generated_at`` / ``observed_at`` of the data and the meta: the time
  a document was made is no change of what it says); a request whose
  ``If-None-Match`` names it (weak comparison, ``*``, lists) gets 304 and no body;
* error: ``{"ok": false, "schema_version": 1, "data": null, "error": {"code", "message"},
  "meta": {"contract_version", …}}`` with a string ``code`` (``not_found``,
  ``invalid_query``, ``method_not_allowed``, ``unavailable``), also in
  ``x-metagraph-error-code``, never cached;
* every answer: ``access-control-allow-origin: *`` and the exposed headers list,
  ``x-metagraph-contract-version``, ``content-type: application/json``.

chainproxy's data changes with every probe, so success answers say
``cache-control: public, no-cache``: a cache keeps them but asks again, and
the ETag makes asking again cost a 304.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.metagraphed.vocab import CONTRACT_VERSION

EXPOSED = ", ".join(
    (
        "etag",
        "link",
        "retry-after",
        "x-metagraph-contract-version",
        "x-metagraph-error-code",
        "x-metagraph-rpc-cache",
        "x-metagraph-rpc-endpoint-id",
        "x-metagraph-rpc-provider",
        "x-metagraph-rpc-attempts",
    )
)
ALLOW = "GET, HEAD, OPTIONS"


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes  # empty for a 304 or a preflight
    headers: tuple[tuple[str, str], ...]


def _common() -> list[tuple[str, str]]:
    return [
        ("Content-Type", "application/json"),
        ("Access-Control-Allow-Origin", "*"),
        ("Access-Control-Expose-Headers", EXPOSED),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Metagraph-Contract-Version", CONTRACT_VERSION),
        ("Vary", "Accept, Accept-Encoding"),
    ]


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def weak_etag(body: bytes) -> str:
    return f'W/"{hashlib.sha256(body).hexdigest()[:32]}"'


def none_match(if_none_match: str | None, etag: str) -> bool:
    """Does ``If-None-Match`` name ``etag`` (weak comparison)?"""
    if not if_none_match:
        return False
    current = etag.removeprefix("W/")
    for tag in if_none_match.split(","):
        tag = tag.strip()
        if tag == "*" or tag.removeprefix("W/") == current:
            return True
    return False


def success(
    data: Any,
    *,
    meta: Mapping[str, Any] | None = None,
    if_none_match: str | None = None,
    link: str | None = None,
) -> Answer:
    """200 with the envelope, or 304 when the client already has this body."""
    doc = {
        "ok": True,
        "schema_version": 1,
        "data": data,
        "meta": {"contract_version": CONTRACT_VERSION, **(meta or {})},
    }
    body = _dumps(doc)
    etag = weak_etag(_dumps({**doc, "data": _timeless(data), "meta": _timeless(doc["meta"])}))
    headers = [*_common(), ("Cache-Control", "public, no-cache"), ("ETag", etag)]
    if link:
        headers.append(("Link", link))
    if none_match(if_none_match, etag):
        return Answer(304, b"", tuple(headers))
    return Answer(200, body, tuple(headers))


# when the document was made: not what it says (a weak ETag leaves it out, or
# it would change every second and no client would ever get a 304)
_MADE_AT = ("generated_at", "observed_at")


def _timeless(data: Any) -> Any:
    if isinstance(data, dict) and any(k in data for k in _MADE_AT):
        return {k: v for k, v in data.items() if k not in _MADE_AT}
    return data


def error(
    status: int, code: str, message: str, *, meta: Mapping[str, Any] | None = None, **extra: str
) -> Answer:
    """An error answer; ``extra`` headers (``Allow``, ``Retry-After``) by name."""
    doc = {
        "ok": False,
        "schema_version": 1,
        "data": None,
        "error": {"code": code, "message": message},
        "meta": {"contract_version": CONTRACT_VERSION, **(meta or {})},
    }
    headers = [
        *_common(),
        ("Cache-Control", "no-store"),
        ("X-Metagraph-Error-Code", code),
        *((k.replace("_", "-"), v) for k, v in extra.items()),
    ]
    return Answer(status, _dumps(doc), tuple(headers))


def preflight(request_headers: str | None) -> Answer:
    """204 for a CORS preflight: any origin may GET, sending the headers it asks for."""
    allow_headers = request_headers or "accept, if-none-match, content-type"
    return Answer(
        204,
        b"",
        (
            ("Access-Control-Allow-Origin", "*"),
            ("Access-Control-Allow-Methods", ALLOW),
            ("Access-Control-Allow-Headers", allow_headers[:500]),
            ("Access-Control-Max-Age", "86400"),
            ("Allow", ALLOW),
        ),
    )
