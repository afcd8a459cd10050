"""Who a client is for the quota: tiers by address and API key
(addon/quota/tiers.py), and a quota per tier (addon/quota/quotas.py)."""

from __future__ import annotations

import ipaddress

from addon.quota.quotas import Quotas
from addon.quota.tiers import BadKey, Caller, TierBook, take_key
from common.config.model import RateLimitConfig, TierConfig

KEY = "k" * 24
OTHER = "o" * 24

VALIDATORS = TierConfig(
    name="validators",
    cidrs=(ipaddress.ip_network("10.1.0.0/16"),),
    rate_limit=RateLimitConfig(requests=1000),
)
PARTNERS = TierConfig(name="partners", keys=(KEY,), rate_limit=RateLimitConfig(requests=500))


def test_no_key_no_tier_is_the_default_quota() -> None:
    book = TierBook((VALIDATORS, PARTNERS))
    assert book.caller("203.0.113.5", None) == Caller("203.0.113.5")


def test_an_address_in_a_tiers_cidrs_gets_that_tier() -> None:
    book = TierBook((VALIDATORS, PARTNERS))
    assert book.caller("10.1.2.3", None) == Caller("10.1.2.3", "validators")
    assert book.caller("2001:db8::/64", None) == Caller("2001:db8::/64")  # a v6 prefix: no tier


def test_a_key_makes_a_quota_of_its_own_and_never_shows_itself() -> None:
    book = TierBook((VALIDATORS, PARTNERS))
    a = book.caller("203.0.113.5", KEY)
    b = book.caller("198.51.100.9", KEY)
    assert isinstance(a, Caller) and a == b  # per key, not per address
    assert a.tier == "partners" and a.client.startswith("key:partners:")
    assert KEY not in a.client


def test_a_key_that_matches_no_tier_is_refused_not_downgraded() -> None:
    book = TierBook((VALIDATORS, PARTNERS))
    assert isinstance(book.caller("10.1.2.3", OTHER), BadKey)
    assert isinstance(book.caller("10.1.2.3", KEY[:-1] + "x"), BadKey)
    assert isinstance(TierBook(()).caller("10.1.2.3", KEY), BadKey)  # no tiers: no keys


def test_the_key_is_taken_off_the_path() -> None:
    assert take_key("/rpc/v1/finney", None) == (None, "/rpc/v1/finney")
    assert take_key(f"/rpc/v1/finney?api_key={KEY}", None) == (KEY, "/rpc/v1/finney")
    assert take_key(f"/rpc/v1/finney?a=1&api_key={KEY}&b=2", None) == (
        KEY,
        "/rpc/v1/finney?a=1&b=2",
    )
    # the header wins; the query's copy is still taken off
    assert take_key(f"/rpc/v1/finney?api_key={OTHER}", KEY) == (KEY, "/rpc/v1/finney")
    assert take_key("/rpc/v1/finney?api_key=", None) == (None, "/rpc/v1/finney")


def test_each_tier_has_its_own_quota() -> None:
    t = [0.0]
    quotas = Quotas(RateLimitConfig(requests=2), (VALIDATORS, PARTNERS), clock=lambda: t[0])
    for _ in range(2):
        assert quotas.decide("203.0.113.5", 1).allowed  # type: ignore[union-attr]
    assert not quotas.decide("203.0.113.5", 1).allowed  # type: ignore[union-attr]
    d = quotas.decide("10.1.2.3", 1, "validators")
    assert d.allowed and d.limit == 1000  # type: ignore[union-attr]


def test_a_charge_after_the_answer_takes_whatever_is_left() -> None:
    t = [0.0]
    quotas = Quotas(RateLimitConfig(requests=10), clock=lambda: t[0])
    assert quotas.decide("c", 1).remaining == 9  # type: ignore[union-attr]
    quotas.charge("c", 15)  # a big answer: more than is left
    d = quotas.decide("c", 1)
    assert not d.allowed and d.remaining == 0  # type: ignore[union-attr]
    t[0] = 61.0  # the window moved on: the debt is gone with it
    assert quotas.decide("c", 1).allowed  # type: ignore[union-attr]
