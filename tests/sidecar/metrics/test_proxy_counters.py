"""The proxies' live metrics accumulated by the sidecar: counters add up,
gauges are the live proxies' latest snapshots, and both stay bounded."""

from __future__ import annotations

from typing import Any

from common.metrics_wire import DURATION_BUCKETS
from sidecar.metrics.batch_section import parse_metrics
from sidecar.metrics.proxy_counters import Histogram, ProxyCounters, host_of
from tests.fakes import FakeClock
from tests.sidecar.metrics_batch import metrics_section
from tests.sidecar.usage.stats.helpers import EP_A, EP_B, NETWORKS

T0 = 1_800_000_000.0


def section(**kw: Any) -> Any:
    return parse_metrics(metrics_section([EP_A, EP_B], **kw), NETWORKS)


def test_counters_add_up_over_batches() -> None:
    pc = ProxyCounters(FakeClock())
    pc.add(section(), T0)
    pc.add(section(proxy_id="other:1"), T0)
    c = pc.counters()
    assert c.requests[("finney", "chain_getHeader", "ok")] == 20
    assert c.attempts[(EP_A, "timeout")] == 2 and c.attempts[(EP_B, "http-5xx")] == 2
    assert c.failovers == {"finney": 2}
    assert c.extra["chainproxy_redis_fallbacks_total"] == {(("store", "ratelimit"),): 4}
    h = c.duration["finney"]
    assert sum(h.buckets) == 34 and round(h.sum, 6) == 49.4
    assert c.dropped == {}


def test_the_histogram_is_cumulative_with_inf_last() -> None:
    h = Histogram()
    h.buckets[0], h.buckets[-1] = 2, 1
    le = h.cumulative()
    assert le[0] == ("0.005", 2) and le[-1] == ("+Inf", 3)
    assert len(le) == len(DURATION_BUCKETS) + 1 and [n for _, n in le][-2] == 2


def test_new_label_sets_past_the_cap_are_dropped_and_counted() -> None:
    pc = ProxyCounters(FakeClock(), max_series=2)
    rows = [["finney", f"m{i}", "ok", 1] for i in range(3)]
    pc.add(parse_metrics({"proxy_id": "h:1", "requests": rows}, NETWORKS), T0)
    pc.add(parse_metrics({"proxy_id": "h:1", "requests": rows[:1]}, NETWORKS), T0)
    c = pc.counters()
    assert c.requests == {("finney", "m0", "ok"): 2, ("finney", "m1", "ok"): 1}  # known sets grow
    assert c.dropped == {"chainproxy_requests_total": 1}


def test_gauges_sum_the_proxies_heard_from_recently() -> None:
    clock = FakeClock()
    pc = ProxyCounters(clock, gauge_ttl_s=120)
    pc.add(section(proxy_id="a:1"), T0)
    clock.t += 60
    pc.add(section(proxy_id="b:2"), T0 + 60)
    g = pc.gauges()
    assert (g.proxies, g.ws_connections) == (2, 4)
    assert g.client_subscriptions == {"chain_subscribeNewHeads": 6}
    assert g.upstream_subscriptions == {"chain_subscribeNewHeads": 2}
    clock.t += 61  # a:1 is silent for 121 s: it drops out by itself
    g = pc.gauges()
    assert (g.proxies, g.ws_connections) == (1, 2)
    clock.t += 120
    assert pc.gauges().proxies == 0 and pc.gauges().client_subscriptions == {}


def test_a_machines_shared_spool_is_counted_once() -> None:
    pc = ProxyCounters(FakeClock())
    pc.add(section(proxy_id="m1:10", spool=5), T0)
    pc.add(section(proxy_id="m1:11", spool=4), T0)  # same spool, read a moment later
    pc.add(section(proxy_id="m2:10", spool=1), T0)
    assert pc.gauges().spool_batches == 6
    assert host_of("m1:10") == "m1" and host_of("[::1]:7") == "[::1]" and host_of("solo") == "solo"


def test_an_older_snapshot_delivered_late_does_not_replace_the_current_one() -> None:
    pc = ProxyCounters(FakeClock())
    pc.add(section(spool=0), T0)
    pc.add(section(spool=9), T0 - 30)  # from the spool, built before the current one
    assert pc.gauges().spool_batches == 0
    assert pc.counters().requests[("finney", "chain_getHeader", "ok")] == 20  # counters count


def test_live_proxies_are_bounded() -> None:
    pc = ProxyCounters(FakeClock(), max_proxies=2)
    for i in range(3):
        pc.add(section(proxy_id=f"h:{i}"), T0)
    assert pc.gauges().proxies == 2 and pc.counters().dropped == {"gauges": 1}


def test_a_section_without_gauges_leaves_the_snapshot_alone() -> None:
    pc = ProxyCounters(FakeClock())
    pc.add(section(), T0)
    pc.add(parse_metrics({"proxy_id": "proxy-host:4242"}, NETWORKS), T0 + 1)
    assert pc.gauges().ws_connections == 2


def upstream(proxy_id: str, **maps: dict[str, int]) -> Any:
    """A heartbeat of ``proxy_id`` carrying only the per-node gauges ``maps``."""
    return parse_metrics({"proxy_id": proxy_id, "gauges": maps}, NETWORKS)


def test_per_node_gauges_add_up_over_the_live_proxies_and_a_learned_rate_is_the_highest() -> None:
    clock = FakeClock(T0)
    pc = ProxyCounters(clock, gauge_ttl_s=120)
    pc.add(upstream("a:1", upstream_sent_last_s={EP_A: 7, EP_B: 1},
                    upstream_learned_rps={EP_B: 5}), T0)  # fmt: skip
    clock.t += 60
    pc.add(upstream("b:2", upstream_sent_last_s={EP_A: 3}, upstream_learned_rps={EP_B: 6}), T0 + 60)
    g = pc.gauges()
    assert g.upstream_sent_last_s == {EP_A: 10, EP_B: 1}
    # the rate in force: with Redis one rate for the deployment, which every
    # proxy reports (summed, two workers said twice it)
    assert g.upstream_learned_rps == {EP_B: 6}
    clock.t += 61  # a:1 silent for 121 s: its share drops out
    g = pc.gauges()
    assert g.upstream_sent_last_s == {EP_A: 3} and g.upstream_learned_rps == {EP_B: 6}


def test_a_block_a_node_discarded_is_the_highest_any_live_proxy_reported() -> None:
    """``upstream_state_lost``: the sidecar checks that block at the node's next
    full probe; the highest over the live proxies, gone with a silent proxy."""
    clock = FakeClock(T0)
    pc = ProxyCounters(clock, gauge_ttl_s=120)
    pc.add(upstream("a:1", upstream_state_lost={EP_A: 4_000_100, EP_B: 7}), T0)
    clock.t += 60
    pc.add(upstream("b:2", upstream_state_lost={EP_A: 4_000_050}), T0 + 60)
    assert pc.gauges().upstream_state_lost == {EP_A: 4_000_100, EP_B: 7}
    clock.t += 61
    assert pc.gauges().upstream_state_lost == {EP_A: 4_000_050}


def test_a_back_off_ends_at_the_latest_time_any_live_proxy_reported() -> None:
    clock = FakeClock(T0 + 2)  # the batches arrive 2 s after they were built
    pc = ProxyCounters(clock, gauge_ttl_s=120)
    pc.add(upstream("a:1", upstream_backoff_s={EP_A: 30, EP_B: 5}), T0)
    pc.add(upstream("b:2", upstream_backoff_s={EP_A: 10}), T0 + 1)
    g = pc.gauges()
    assert g.upstream_backoff_until == {EP_A: T0 + 30, EP_B: T0 + 5}  # from each sent_at
    assert g.backoff_left() == {EP_A: 28.0, EP_B: 3.0}
    clock.t = T0 + 6  # B's back-off is over: no row rather than zero
    assert pc.gauges().backoff_left() == {EP_A: 24.0}
    pc.add(upstream("a:1"), T0 + 7)  # a:1's newer snapshot: it no longer backs off from A
    assert pc.gauges().upstream_backoff_until == {EP_A: T0 + 11}  # b:2's, still ahead
    clock.t = T0 + 11
    assert pc.gauges().upstream_backoff_until == {}


def test_a_back_off_of_a_proxy_gone_silent_drops_out_with_its_gauges() -> None:
    clock = FakeClock(T0)
    pc = ProxyCounters(clock, gauge_ttl_s=120)
    pc.add(upstream("a:1", upstream_backoff_s={EP_A: 3600}), T0)  # a long Retry-After
    clock.t += 119
    assert pc.gauges().upstream_backoff_until == {EP_A: T0 + 3600}
    clock.t += 1
    assert pc.gauges().upstream_backoff_until == {}


def test_a_back_off_read_late_from_the_spool_counts_only_what_is_left() -> None:
    clock = FakeClock(T0 + 100)
    pc = ProxyCounters(clock)
    pc.add(upstream("a:1", upstream_backoff_s={EP_A: 30}), T0)  # built 100 s ago: over
    assert pc.gauges().upstream_backoff_until == {}


def test_per_node_gauges_are_bounded_like_the_others() -> None:
    pc = ProxyCounters(FakeClock(T0), max_series=1)
    pc.add(upstream("a:1", upstream_sent_last_s={EP_A: 1, EP_B: 2},
                    upstream_backoff_s={EP_A: 9, EP_B: 9}), T0)  # fmt: skip
    g = pc.gauges()
    assert len(g.upstream_sent_last_s) == 1 and len(g.upstream_backoff_until) == 1
