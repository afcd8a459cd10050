"""Per-client rate limit with an injected clock."""

from __future__ import annotations

import ipaddress

import pytest

from addon.quota.local import Decision, RateLimiter, client_identity
from tests.fakes import FakeClock


def limiter(
    requests: int = 100,
    window_s: float = 60.0,
    *,
    max_clients: int = 100_000,
    start: float = 1000.0,
) -> tuple[RateLimiter, FakeClock]:
    clock = FakeClock(start)
    return RateLimiter(requests, window_s, max_clients=max_clients, clock=clock), clock


def headers(decision: Decision) -> dict[str, str]:
    return dict(decision.headers())


def take(rl: RateLimiter, client: str, n: int) -> int:
    return sum(rl.check(client).allowed for _ in range(n))


def test_100_pass_and_the_101st_is_refused() -> None:
    rl, _ = limiter()
    assert take(rl, "1.2.3.4", 100) == 100
    d = rl.check("1.2.3.4")
    assert not d.allowed
    assert d.retry_after_s > 0
    h = headers(d)
    assert int(h["Retry-After"]) >= 1
    assert h["X-RateLimit-Limit"] == "100"
    assert h["X-RateLimit-Remaining"] == "0"
    assert h["X-RateLimit-Policy"] == "100;w=60"
    assert int(h["X-RateLimit-Reset"]) > 0


def test_clients_have_separate_quotas() -> None:
    rl, _ = limiter()
    assert take(rl, "1.1.1.1", 100) == 100
    assert not rl.check("1.1.1.1").allowed
    assert rl.check("2.2.2.2").allowed


@pytest.mark.parametrize(("requests", "window"), [(1, 1.0), (7, 1.0), (3, 10.0), (1000, 60.0)])
def test_other_quotas(requests: int, window: float) -> None:
    rl, _ = limiter(requests, window)
    assert take(rl, "c", requests) == requests
    assert not rl.check("c").allowed


@pytest.mark.parametrize("start", [0.0, 3_000_000.7, 1.7e9, 12_345.999])
def test_full_quota_is_available_at_any_clock_value(start: float) -> None:
    # time.monotonic() grows with uptime; the limiter must not lose calls to rounding
    rl, _ = limiter(start=start)
    assert take(rl, "c", 100) == 100
    assert not rl.check("c").allowed


def test_success_headers() -> None:
    rl, clock = limiter()
    d = rl.check("c")
    assert d.allowed and d.retry_after_s == 0
    h = headers(d)
    assert set(h) == {
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
        "X-RateLimit-Policy",
    }
    assert h["X-RateLimit-Limit"] == "100"
    assert h["X-RateLimit-Remaining"] == "99"
    assert h["X-RateLimit-Policy"] == "100;w=60"
    reset = int(h["X-RateLimit-Reset"])
    assert 0 < reset <= 60
    for expected in range(98, 49, -1):
        assert rl.check("c").remaining == expected
    # after Reset seconds, every counted call has left the window
    clock.advance(reset)
    d = rl.check("c")
    assert d.allowed and d.remaining == 99


def test_batch_cost_is_taken_whole_or_refused_whole() -> None:
    rl, _ = limiter()
    assert rl.check("c", cost=95).allowed
    d = rl.check("c", cost=10)
    assert not d.allowed
    assert d.remaining == 5  # nothing was taken by the refused batch
    assert int(headers(d)["Retry-After"]) >= 1
    assert d.retry_after_s > 0
    ok = rl.check("c", cost=5)
    assert ok.allowed and ok.remaining == 0
    assert not rl.check("c", cost=1).allowed


def test_batch_of_the_whole_quota_passes_on_a_fresh_client() -> None:
    rl, _ = limiter()
    d = rl.check("c", cost=100)
    assert d.allowed and d.remaining == 0
    assert not rl.check("c").allowed


@pytest.mark.parametrize("cost", [1, 10, 100])
def test_waiting_retry_after_is_enough(cost: int) -> None:
    rl, clock = limiter()
    rl.check("c", cost=100)
    d = rl.check("c", cost=cost)
    assert not d.allowed
    retry = int(headers(d)["Retry-After"])
    assert 1 <= retry <= 60
    assert d.retry_after_s <= retry
    clock.advance(retry - 1)
    assert not rl.check("c", cost=cost).allowed  # Retry-After is not overly pessimistic...
    clock.advance(1)
    assert rl.check("c", cost=cost).allowed  # ...and it is enough


def test_quota_refills_gradually_as_calls_leave_the_window() -> None:
    rl, clock = limiter()
    for k in range(100):  # a steady client: one call every 0.6 s
        clock.t = 1000.0 + 0.6 * k
        assert rl.check("c").allowed
    clock.t = 1059.9
    assert not rl.check("c").allowed  # the 101st call within 60 s
    clock.t = 1060.0  # the first calls (t=1000.0, 1000.6) have left the window
    refilled = take(rl, "c", 100)
    assert 1 <= refilled < 100
    clock.t = 1121.0
    assert take(rl, "c", 100) == 100


def test_after_the_window_the_whole_quota_is_back() -> None:
    rl, clock = limiter()
    assert take(rl, "c", 100) == 100
    clock.advance(60)
    d = rl.check("c")
    assert d.allowed and d.remaining == 99
    assert take(rl, "c", 99) == 99
    assert not rl.check("c").allowed


def test_refused_requests_do_not_push_the_refill_further_away() -> None:
    rl, clock = limiter()
    take(rl, "c", 100)
    for _ in range(50):
        clock.advance(1)
        assert not rl.check("c").allowed
    clock.t = 1060.0
    assert rl.check("c").allowed


def test_short_window_is_not_a_fixed_window() -> None:
    rl, clock = limiter(5, 1.0, start=1000.995)
    passed = take(rl, "c", 5)
    clock.advance(0.01)  # 1001.005: 10 ms later, still within the 1 s window
    passed += take(rl, "c", 5)
    assert passed == 5


# --- memory bound --------------------------------------------------------------------------


def test_memory_is_bounded_with_many_clients() -> None:
    rl, clock = limiter(max_clients=1000)
    for i in range(100_000):
        rl.check(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}")
        if i % 10_000 == 0:
            clock.advance(0.001)
        assert len(rl) <= 1000
    assert len(rl) <= 1000


def test_memory_bound_keeps_the_most_recent_clients_limited() -> None:
    rl, _ = limiter(max_clients=10)
    take(rl, "hot", 100)
    for i in range(5):
        rl.check(f"cold-{i}")
    assert not rl.check("hot").allowed  # still tracked: 6 clients <= 10


def test_drained_clients_are_evicted() -> None:
    rl, clock = limiter()
    for i in range(50):
        rl.check(f"c{i}", cost=3)
    assert len(rl) == 50
    clock.advance(61)
    rl.check("newcomer")
    assert len(rl) == 1
    # forgetting a drained client loses nothing: it gets its full quota
    d = rl.check("c0")
    assert d.allowed and d.remaining == 99


# --- client identity -----------------------------------------------------------------------

TRUSTED = [ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::/8")]


def test_untrusted_peer_forwarded_for_is_ignored() -> None:
    assert client_identity("203.0.113.9", "1.1.1.1", TRUSTED) == "203.0.113.9"
    assert client_identity("203.0.113.9", "1.1.1.1", []) == "203.0.113.9"
    assert client_identity("203.0.113.9", None, TRUSTED) == "203.0.113.9"


def test_trusted_peer_uses_the_right_most_untrusted_hop() -> None:
    xff = "6.6.6.6, 198.51.100.7, 10.1.2.3"
    assert client_identity("10.0.0.1", xff, TRUSTED) == "198.51.100.7"
    assert client_identity("10.0.0.1", "198.51.100.7", TRUSTED) == "198.51.100.7"
    # a client cannot pick its identity by prepending hops
    assert client_identity("10.0.0.1", "1.2.3.4, 198.51.100.7", TRUSTED) == "198.51.100.7"


def test_trusted_ipv6_peer() -> None:
    assert client_identity("fd00::1", "2001:db8::5, fd00::2", TRUSTED) == "2001:db8::5"


def test_all_hops_trusted_gives_the_left_most() -> None:
    assert client_identity("10.0.0.1", "10.9.9.9, 10.0.0.2", TRUSTED) == "10.9.9.9"


def test_a_hop_with_a_port_is_its_address() -> None:
    """Balancers that append ``ip:port`` (or ``[ipv6]:port``): one client is
    one quota (and its tier's CIDR matches) whatever port it came from."""
    for hop in ("198.51.100.7:1111", "198.51.100.7:2222", "198.51.100.7"):
        assert client_identity("10.0.0.1", f"1.2.3.4, {hop}", TRUSTED) == "198.51.100.7"
    for hop in ("[2001:db8::5]:443", "[2001:db8::5]", "2001:db8::5"):
        assert client_identity("10.0.0.1", hop, TRUSTED) == "2001:db8::5"
    assert client_identity("10.0.0.1", "10.0.0.2:80, 10.0.0.3", TRUSTED) == "10.0.0.2"


def test_trusted_peer_without_forwarded_for_is_the_peer() -> None:
    assert client_identity("10.0.0.1", None, TRUSTED) == "10.0.0.1"
    assert client_identity("10.0.0.1", "", TRUSTED) == "10.0.0.1"
    assert client_identity("10.0.0.1", " , ,", TRUSTED) == "10.0.0.1"


@pytest.mark.parametrize(
    ("peer", "xff", "expected"),
    [
        ("::ffff:203.0.113.9", None, "203.0.113.9"),
        ("::ffff:203.0.113.9", "1.1.1.1", "203.0.113.9"),
        ("::ffff:10.0.0.1", "198.51.100.7", "198.51.100.7"),  # mapped peer is still trusted
        ("10.0.0.1", "::ffff:198.51.100.7", "198.51.100.7"),
        ("10.0.0.1", "198.51.100.7, ::ffff:10.0.0.9", "198.51.100.7"),
        ("2001:DB8:0:0::1", None, "2001:db8::1"),
    ],
)
def test_addresses_are_canonicalised(peer: str, xff: str | None, expected: str) -> None:
    assert client_identity(peer, xff, TRUSTED) == expected


def test_mapped_and_plain_spellings_share_one_quota() -> None:
    rl, _ = limiter(requests=2)
    assert rl.check(client_identity("203.0.113.9", None, TRUSTED)).allowed
    assert rl.check(client_identity("::ffff:203.0.113.9", None, TRUSTED)).allowed
    assert not rl.check(client_identity("::ffff:cb00:7109", None, TRUSTED)).allowed


@pytest.mark.parametrize(
    "xff",
    [
        "garbage",
        "unknown, ,,, ",
        "1.2.3.4:5678",
        "[2001:db8::1]:443",
        "\x00\xff" * 1000,
        "x" * 100_000,
        ",".join(["999.1.1.1"] * 1000),
        "1.2.3.4\r\nX-Evil: 1",
    ],
)
def test_junk_forwarded_for_does_not_crash(xff: str) -> None:
    ident = client_identity("10.0.0.1", xff, TRUSTED)
    assert isinstance(ident, str) and len(ident) <= 64
    assert client_identity("203.0.113.9", xff, TRUSTED) == "203.0.113.9"


@pytest.mark.parametrize("peer", ["", "not-an-ip", "x" * 10_000])
def test_junk_peer_does_not_crash(peer: str) -> None:
    ident = client_identity(peer, "1.2.3.4", TRUSTED)
    assert isinstance(ident, str) and len(ident) <= 64


def test_ipv6_clients_per_address_by_default_or_per_subnet() -> None:
    from addon.quota.local import client_identity

    a, b = "2001:db8:1:2::1", "2001:db8:1:2:ffff::9"
    assert client_identity(a, None, ()) != client_identity(b, None, ())
    assert client_identity(a, None, (), ipv6_prefix=64) == client_identity(
        b, None, (), ipv6_prefix=64
    )
    assert client_identity("2001:db8:1:3::1", None, (), ipv6_prefix=64) != client_identity(
        a, None, (), ipv6_prefix=64
    )
    assert client_identity("10.0.0.1", None, (), ipv6_prefix=64) == "10.0.0.1"


def test_units_given_back_come_off_the_newest_buckets() -> None:
    rl, clock = limiter(requests=10)
    assert rl.check("c", 3).allowed
    clock.t += 5.0  # a later bucket
    assert rl.check("c", 4).allowed
    rl.refund("c", 5)  # the newest 4, then 1 of the older 3
    assert rl.check("c", take=False).remaining == 8
    rl.refund("c", 50)  # never more than was taken
    assert rl.check("c", take=False).remaining == 10
    rl.refund("nobody", 3)  # a client with nothing taken: nothing to do
    assert rl.check("nobody", take=False).remaining == 10
