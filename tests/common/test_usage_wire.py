"""The usage batch on the wire (``common.usage_wire``): what the proxy's
encoders write is what the sidecar's decoder takes, field for field."""

from __future__ import annotations

import pytest

from common import latency_hist
from common.usage_wire import BatchError, Counts, calls_in, decode_batch, new_batch, rollup_doc

NOW = 1_763_700_000.0
MINUTE = int(NOW // 60)
EP = "endpoint-srf-" + "a" * 16


def test_an_encoded_batch_decodes_to_the_same_rollups() -> None:
    hist: dict[int, int] = {}
    for ms in (12.5, 12.5, 80.0):
        latency_hist.add(hist, ms)
    counts = Counts(requests=3, errors=1, failovers=1, cache_hits=0, latency_ms_sum=105.00049)
    docs = [
        rollup_doc(MINUTE, "finney", EP, "chain_getHeader", counts, hist),
        rollup_doc(MINUTE, "finney", None, "system_health", Counts(1, 0, 0, 1, 0.5), {0: 1}),
    ]
    batch = new_batch(docs, NOW, {"proxy_id": "h:1"})
    assert calls_in(batch) == 4
    d = decode_batch(batch, ["finney"], NOW)
    assert (d.batch_id, d.sent_at, d.metrics) == (batch["batch_id"], NOW, {"proxy_id": "h:1"})
    [a, b] = d.rollups
    assert a.key == (MINUTE, "finney", EP, "chain_getHeader")
    assert (a.requests, a.errors, a.failovers, a.cache_hits) == (3, 1, 1, 0)
    assert a.latency_ms_sum == 105.0 and a.hist == hist
    assert b.endpoint is None and b.key[2] == "" and b.cache_hits == 1


def test_counts_add_up_rollups() -> None:
    total = Counts()
    d = decode_batch(
        new_batch([rollup_doc(MINUTE, "x", EP, "m", Counts(2, 1), {5: 2})], NOW), ["x"], NOW
    )
    total.add(d.rollups[0])
    total.add(Counts(1, 0, 1, 1, 2.0))
    assert total == Counts(3, 1, 1, 1, 2.0)


def test_a_batch_without_metrics_has_none_and_a_bad_one_is_refused() -> None:
    assert decode_batch(new_batch([], NOW), ["x"], NOW).metrics is None
    with pytest.raises(BatchError, match="batch_id"):
        decode_batch({"batch_id": "x", "sent_at": NOW, "rollups": []}, ["x"], NOW)
