"""Endpoint ids: stable, one per endpoint, secret-free."""

from __future__ import annotations

import pytest

from common.config import parse_config
from common.endpoint_id import endpoint_id, redact_url
from tests.common.helpers import ID_RE, assert_one_line_error, ep, with_endpoints


@pytest.mark.parametrize(
    "url",
    [
        "https://entrypoint-finney.opentensor.ai",
        "wss://entrypoint-finney.opentensor.ai:443",
        "http://127.0.0.1:9944",
        "http://[::1]:9944/rpc",
    ],
)
def test_endpoint_id_format(url: str) -> None:
    assert ID_RE.match(endpoint_id(url))
    assert endpoint_id(url) == endpoint_id(url)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("https://entrypoint-finney.opentensor.ai", "https://entrypoint-finney.opentensor.ai/"),
        ("https://entrypoint-finney.opentensor.ai", "https://ENTRYPOINT-finney.opentensor.AI"),
        ("https://entrypoint-finney.opentensor.ai", "HTTPS://entrypoint-finney.opentensor.ai:443"),
        ("wss://lite.chain.opentensor.ai:443", "wss://lite.chain.opentensor.ai"),
        ("http://node.example:80/rpc/", "http://node.example/rpc"),
    ],
)
def test_two_spellings_of_one_url_have_one_id(a: str, b: str) -> None:
    assert endpoint_id(a) == endpoint_id(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("https://entrypoint-finney.opentensor.ai", "https://lite.chain.opentensor.ai"),
        ("https://entrypoint-finney.opentensor.ai", "wss://entrypoint-finney.opentensor.ai"),
        ("http://127.0.0.1:9944", "http://127.0.0.1:9945"),
        (
            "https://bittensor-finney.api.onfinality.io/public",
            "https://bittensor-finney.api.onfinality.io/public-ws",
        ),
    ],
)
def test_different_endpoints_have_different_ids(a: str, b: str) -> None:
    assert endpoint_id(a) != endpoint_id(b)


SECRET = "9f3c2a7be41d4c0f8a6b5e2d1c3b4a59"


@pytest.mark.parametrize(
    ("with_key", "other_key", "bare_host"),
    [
        (
            f"https://bittensor-finney.api.onfinality.io/rpc?apikey={SECRET}",
            "https://bittensor-finney.api.onfinality.io/rpc?apikey=abcdefabcdef0123456789aa",
            "bittensor-finney.api.onfinality.io",
        ),
        (
            f"https://rpc.example.net/rpc?api_key={SECRET}&chain=finney",
            "https://rpc.example.net/rpc?api_key=other0other0other0other0&chain=finney",
            "rpc.example.net",
        ),
        (
            f"https://api-bittensor.dwellir.com/{SECRET}",
            "https://api-bittensor.dwellir.com/0aa1bb2cc3dd4ee5ff60718293a4b5c6",
            "api-bittensor.dwellir.com",
        ),
        (
            "https://api-bittensor.example.com/v1/4f1c8e2a-7b3d-4e5f-9a6b-1c2d3e4f5a6b",
            "https://api-bittensor.example.com/v1/0aaa1bbb-2ccc-4ddd-8eee-ffff00001111",
            "api-bittensor.example.com",
        ),
        (
            f"https://user:{SECRET}@node.example.org/rpc",
            "https://user:differentpassword99@node.example.org/rpc",
            "node.example.org",
        ),
        (
            f"wss://{SECRET}@node.example.org:443/ws",
            "wss://node.example.org/ws",
            "node.example.org",
        ),
    ],
)
def test_secret_is_removed_before_hashing_and_never_shown(
    with_key: str, other_key: str, bare_host: str
) -> None:
    assert endpoint_id(with_key) == endpoint_id(other_key)
    safe = redact_url(with_key)
    assert bare_host in safe
    assert SECRET not in safe
    assert "4f1c8e2a-7b3d-4e5f-9a6b-1c2d3e4f5a6b" not in safe
    assert "@" not in safe and "differentpassword99" not in redact_url(other_key)


def test_config_endpoint_safe_url_and_id_hide_the_key() -> None:
    url = f"https://bittensor-finney.api.onfinality.io/rpc?apikey={SECRET}"
    cfg = parse_config(with_endpoints(ep(url=url, provider="onfinality")), {})
    (e,) = cfg.endpoints
    assert e.url == url  # the full URL stays available to forward to
    assert SECRET not in e.safe_url and SECRET not in e.id
    assert e.safe_url.startswith("https://bittensor-finney.api.onfinality.io/rpc")
    assert e.id == endpoint_id("https://bittensor-finney.api.onfinality.io/rpc?apikey=X1")
    assert ID_RE.match(e.id)


def test_same_host_two_api_keys_is_a_duplicate() -> None:
    raw = with_endpoints(
        ep(url=f"https://a.example/rpc?apikey={SECRET}"),
        ep(url="https://a.example/rpc?apikey=another-key-0123456789"),
    )
    assert_one_line_error(raw, "registry.endpoints[1].url")


def test_bare_query_key_that_looks_like_a_secret_is_redacted() -> None:
    from common.endpoint_id import endpoint_id, redact_url

    url = "https://rpc.example.com/ws?0123abcd4567ef89aa11bb22cc33dd44"
    assert "0123abcd4567ef89" not in redact_url(url)
    assert endpoint_id(url) == endpoint_id(
        "https://rpc.example.com/ws?ffffffffffffffffffffffffffffffff"
    )
