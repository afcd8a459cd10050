"""chainproxy's words in Metagraphed's spelling (pure).

Metagraphed's vocabularies are read from its OpenAPI document (contract
``2026-07-03.2``) and its artifact builders
(``scripts/lib/endpoint-artifacts.ts``, ``src/health-probe-core.ts``). Each
mapping below turns a fact chainproxy has into the word Metagraphed uses for
it; where chainproxy has no such fact the caller sends null, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sidecar.probing.health import Health

CONTRACT_VERSION = "2026-07-03.2"  # the Metagraphed contract these shapes were read from

# Metagraphed's endpoint kinds (the ``kind`` filter accepts every one of them).
ENDPOINT_KINDS = (
    "archive",
    "dashboard",
    "data-artifact",
    "docs",
    "example",
    "openapi",
    "repo-registry",
    "sdk",
    "source-repo",
    "sse",
    "subnet-api",
    "subtensor-rpc",
    "subtensor-wss",
    "website",
)
POOL_KINDS = ("subtensor-rpc", "subtensor-wss", "archive")
LAYERS = ("bittensor-base", "data-provider", "docs-provider", "subnet-app")
STATUSES = ("ok", "degraded", "failed", "unknown")
PUBLICATION_STATES = ("candidate", "verified", "monitored", "pool-eligible", "disabled", "rejected")
SEVERITIES = ("critical", "warning", "info")
INCIDENT_STATES = ("active", "resolved")
PROVIDER_KINDS = (
    "data-provider",
    "docs-provider",
    "infrastructure-provider",
    "registry",
    "subnet-team",
)
AUTHORITIES = ("community", "official", "provider-claimed", "registry-observed")
CLASSIFICATIONS = (
    "live",
    "redirected",
    "auth-required",
    "dead",
    "unsafe",
    "unsupported",
    "rate-limited",
    "transient",
    "timeout",
    "content-mismatch",
    "wrong-chain",
    "unknown",
)

_KIND = {
    "node-rpc": "subtensor-rpc",
    "node-wss": "subtensor-wss",
    "data-artifact": "data-artifact",
    "sse": "sse",
}
# Metagraphed's own rule (endpointLayer): the layer follows from the kind.
_LAYER = {
    "subtensor-rpc": "bittensor-base",
    "subtensor-wss": "bittensor-base",
    "data-artifact": "data-provider",
    "sse": "subnet-app",
}
_SAME = {"live", "dead", "timeout", "rate-limited", "wrong-chain", "unknown"}
_OTHER = {
    "bad-response": "content-mismatch",  # answered, but not what the probe expects
    "answer-mismatch": "content-mismatch",  # outvoted by the cross-check
    "silent": "transient",  # its subscription socket stopped pushing (answers calls)
    "aborted": "transient",  # cut mid-answer
    "syncing": "transient",  # the node says it is catching up
    "probe-error": "unknown",  # a bug in the probe says nothing about the endpoint
}
# Metagraphed's statusForClassification: these are "degraded", the rest "failed".
_SOFT = {"rate-limited", "auth-required", "transient", "timeout"}


def kind(chainproxy_kind: str) -> str:
    return _KIND.get(chainproxy_kind, chainproxy_kind)


def layer(metagraphed_kind: str) -> str:
    return _LAYER.get(metagraphed_kind, "subnet-app")


def classification(c: str) -> str:
    """A chainproxy probe classification in Metagraphed's vocabulary; the
    original is kept in the row's ``error``. HTTP answers: 401/403 need
    credentials, 404/405/501 mean the path or method is not served there,
    5xx and other 4xx are transient."""
    if c in _SAME:
        return c
    if c in _OTHER:
        return _OTHER[c]
    if c.startswith("http-"):
        code = c.removeprefix("http-")
        if code in ("401", "403"):
            return "auth-required"
        if code in ("404", "405", "501"):
            return "unsupported"
        return "transient"
    return "unknown"


def status(h: Health) -> str:
    """chainproxy's flap-damped status in Metagraphed's four words: not probed
    → unknown; OK and the last probe live → ok; OK but the last probe failed
    (not yet ``fail_threshold`` in a row) → degraded; Degraded → Metagraphed's
    own rule on the last classification (soft failures degraded, hard failed)."""
    if not h.probed or h.status == "Unknown":
        return "unknown"
    if h.status == "OK":
        return "ok" if h.classification == "live" else "degraded"
    return "degraded" if classification(h.classification) in _SOFT else "failed"


def rollup(statuses: Iterable[str]) -> str:
    """Metagraphed's rollupSubnetStatus over member statuses."""
    counts = {s: 0 for s in STATUSES}
    total = 0
    for s in statuses:
        counts[s] += 1
        total += 1
    if total == 0 or counts["unknown"] == total:
        return "unknown"
    if counts["failed"] == 0 and counts["degraded"] == 0:
        return "ok"
    if counts["ok"] > 0 or counts["degraded"] > 0:
        return "degraded"
    return "failed"


def slugify(name: str) -> str:
    """A provider name as Metagraphed's slug (``^[a-z0-9-]+$``)."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "provider"


def provider_slugs(names: Iterable[str]) -> dict[str, str]:
    """Provider name → unique slug; names that slug alike get ``-2``, ``-3`` … in
    sorted name order, so a slug does not depend on the config's order."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in sorted(set(names)):
        base = slugify(name)
        slug, n = base, 1
        while slug in taken:
            n += 1
            slug = f"{base}-{n}"
        taken.add(slug)
        out[name] = slug
    return out
