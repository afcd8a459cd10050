"""The dashboard's own pure helpers: the network scope, links, the
statistics' updated time, and a node's back-off and budget in words."""

from __future__ import annotations

from typing import Any

import pytest

from common.config import Config, parse_config
from sidecar.dashboard.scope import page_href, parse_network, scoped
from sidecar.dashboard.wording import (
    age_text,
    backoff_text,
    capacity_text,
    horizon_text,
    updated_text,
)
from sidecar.registry.documents import PageError

T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


def cfg() -> Config:
    def ep(port: int, network: str, kind: str = "node-rpc") -> dict[str, Any]:
        scheme = "ws" if kind == "node-wss" else "http"
        return {"url": f"{scheme}://127.0.0.1:{port}", "provider": f"p{port}",
                "kind": kind, "network": network}  # fmt: skip

    endpoints = [ep(1, "finney"), ep(2, "finney", "node-wss"), ep(3, "test")]
    return parse_config({"registry": {"endpoints": endpoints}}, env={})


def test_a_network_narrows_the_registry_to_its_endpoints() -> None:
    c = cfg()
    assert scoped(c, None) is c
    test = scoped(c, "test")
    assert [e.provider for e in test.endpoints] == ["p3"] and list(test.networks) == ["test"]
    assert test.proxy == c.proxy  # the proxy's networks (eligibility, usage) are unchanged


def test_the_network_parameter_is_a_configured_network() -> None:
    c = cfg()
    assert parse_network(c, None) is None and parse_network(c, "") is None
    assert parse_network(c, "finney") == "finney"
    with pytest.raises(PageError) as e:
        parse_network(c, "mainnet" + "x" * 100)
    assert e.value.status == 404 and "(known: finney, test)" in str(e.value)
    assert len(str(e.value)) < 100  # the value is cut


def test_links_keep_the_network_and_start_with_the_page() -> None:
    assert page_href(None) == "/"
    assert page_href("test") == "?network=test"
    assert page_href(None, 2, "callable") == "?page=2#callable"
    assert page_href("test", 2, "callable") == "?page=2&network=test#callable"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-30, "just now"), (0, "just now"), (4.9, "just now"), (42, "42 s ago"), (60, "1 min ago"),
     (7 * 60 + 59, "7 min ago"), (3 * 3600 + 5, "3 h ago"), (2 * 86_400 + 1, "2 d ago")],
)  # fmt: skip
def test_age_in_words(seconds: float, text: str) -> None:
    assert age_text(seconds) == text


def test_updated_is_utc_and_how_long_ago() -> None:
    assert updated_text(None, T0) is None
    assert updated_text(T0, T0 + 180) == "2027-01-15 08:00:00 UTC (3 min ago)"


def test_a_back_off_says_until_when_with_the_date_only_when_not_today() -> None:
    assert backoff_text("2027-01-15T14:03:21Z", T0) == "backing off until 14:03:21 UTC"
    assert backoff_text("2027-01-16T00:00:10Z", T0) == "backing off until 2027-01-16 00:00:10 UTC"


@pytest.mark.parametrize(
    ("max_rps", "max_concurrency", "learned", "text"),
    [
        (20, 8, None, "≤ 20/s, ≤ 8 in flight"),
        (20, None, None, "≤ 20/s"),
        (None, 8, 12, "≤ 8 in flight · learned 12/s"),
        (None, None, 12, "learned 12/s"),
        (None, None, None, ""),
    ],
)
def test_a_budget_and_a_learned_rate_in_words(
    max_rps: int | None, max_concurrency: int | None, learned: int | None, text: str
) -> None:
    row = {"budget": {"max_rps": max_rps, "max_concurrency": max_concurrency},
           "learned_rps": learned}  # fmt: skip
    assert capacity_text(row) == text


@pytest.mark.parametrize(
    ("earliest", "keeps", "model", "exact", "text"),
    [
        (None, None, "unknown", False, ""),
        (0, None, "archive", True, "archive"),
        (4000, 256, "window", True, "last 256 blocks"),
        (4000, 200, "window", False, "last ≥ 200 blocks"),
        (1234, None, "fixed", True, "from #1234"),
        (1234, None, "unknown", False, "≥ #1234"),
    ],
)
def test_a_state_horizon_in_words(
    earliest: int | None, keeps: int | None, model: str, exact: bool, text: str
) -> None:
    row = {"earliest": earliest, "lost": None, "keeps": keeps, "model": model, "exact": exact}
    assert horizon_text(row) == text
