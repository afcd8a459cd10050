"""Who a client is for the quota: its tier and its identity (pure).

A client matches a tier of ``proxy.tiers`` by its address (after the trusted
``X-Forwarded-For`` rules) or by an API key (header ``X-Api-Key`` or query
``?api_key=``, since a browser's WebSocket cannot set headers). A keyed
client's quota is per key, not per address; no key means the address's tier
or the default quota (keyless access stays); a key that matches no tier is
refused (401, ``data.policy = "api_key"``), never silently downgraded.

Keys are secrets. They are looked up by their SHA-256 (a dict hit on a hash
leaks nothing an attacker can steer byte by byte) and confirmed with
``hmac.compare_digest``; the identity a keyed client gets, which logs, 429
bodies and mitmweb may show, names the tier and a short digest, never the key.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

from common.config.model import TierConfig

KEY_HEADER = "X-Api-Key"
KEY_PARAM = "api_key"


@dataclass(frozen=True, slots=True)
class Caller:
    """Whom a call is charged to: ``client`` (an address or ``key:<tier>:<digest>``)
    and its tier's name (None: the default quota)."""

    client: str
    tier: str | None = None
    address: str = ""  # the address it came from (a keyed client's too)


@dataclass(frozen=True, slots=True)
class BadKey:
    """An API key that matches no tier."""


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class TierBook:
    def __init__(self, tiers: tuple[TierConfig, ...]) -> None:
        self.tiers = {t.name: t for t in tiers}
        self._by_key: dict[str, tuple[str, TierConfig]] = {
            digest(k): (k, t) for t in tiers for k in t.keys
        }
        self._by_net = [(net, t) for t in tiers for net in t.cidrs]

    def __bool__(self) -> bool:
        return bool(self.tiers)

    @property
    def has_keys(self) -> bool:
        """Whether any tier is reached by key: else keys are not looked for at all."""
        return bool(self._by_key)

    def caller(self, address: str, key: str | None) -> Caller | BadKey:
        if key is not None:
            d = digest(key)
            found = self._by_key.get(d)
            if found is None or not hmac.compare_digest(found[0].encode(), key.encode()):
                return BadKey()
            tier = found[1]
            return Caller(f"key:{tier.name}:{d[:12]}", tier.name)
        if self._by_net:
            name = self._address_tier(address)
            if name is not None:
                return Caller(address, name)
        return Caller(address)

    @functools.lru_cache(maxsize=8192)  # noqa: B019 - one book per config, few addresses
    def _address_tier(self, address: str) -> str | None:
        try:
            ip = ipaddress.ip_address(address.partition("/")[0])
        except ValueError:
            return None
        for net, tier in self._by_net:
            if ip.version == net.version and ip in net:
                return tier.name
        return None


def take_key(path: str, header: str | None) -> tuple[str | None, str]:
    """The API key a request carries, and its path without ``api_key`` in the
    query (so the key is never logged or shown with the flow)."""
    key = header.strip() if header else None
    base, sep, query = path.partition("?")
    if not sep or KEY_PARAM not in query:
        return key or None, path
    pairs = parse_qsl(query, keep_blank_values=True)
    rest = [(k, v) for k, v in pairs if k != KEY_PARAM]
    if key is None:
        key = next((v for k, v in pairs if k == KEY_PARAM), None)
    return key or None, base + ("?" + urlencode(rest) if rest else "")
