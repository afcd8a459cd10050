"""Scenario 15 and 16's pure parts: which calls miss, that a miss is never
asked twice, the bodies the load client sends, the runs each shape plans."""

from __future__ import annotations

import json

import pytest

from bench.measure import Target
from bench.websocket import SHAPES, Subject, plan_runs, rotated, ws_url
from bench.wsload import body, failed, is_miss, miss_height, miss_key


@pytest.mark.parametrize("ratio", [0.0, 0.25, 0.5, 1.0])
def test_the_share_of_misses_is_the_ratio_and_evenly_spread(ratio: float) -> None:
    marks = [is_miss(i, ratio) for i in range(1000)]
    assert sum(marks) == round(1000 * ratio)
    if 0 < ratio < 1:  # never two long runs of one kind
        assert not any(all(marks[i : i + int(2 / ratio)]) for i in range(900))


def test_misses_are_distinct_within_a_run_and_across_runs() -> None:
    keys = {miss_key(n, i) for n in (1, 2) for i in range(5000)}
    assert len(keys) == 10_000
    heights = [miss_height(7, i) for i in range(5000)]
    assert len(set(heights)) == 5000 and min(heights) >= 1


def test_bodies_carry_their_index_as_id_and_the_asked_call() -> None:
    hit = ("chain_getHeader", ["0xab"])
    doc = json.loads(body(3, 0.0, 9, hit))
    assert doc == {"jsonrpc": "2.0", "id": 3, "method": "chain_getHeader", "params": ["0xab"]}
    miss = json.loads(body(4, 1.0, 9, hit))
    assert miss["method"] == "state_getStorage" and miss["params"] == [miss_key(9, 4)]
    assert not miss_key(9, 4).startswith("0x00")  # the node answers a value, not null
    bh = json.loads(body(4, 1.0, 9, hit, "blockhash"))
    assert bh["method"] == "chain_getBlockHash" and bh["params"] == [miss_height(9, 4)]


def test_an_answer_is_matched_by_id_and_an_error_counts() -> None:
    assert failed(b'{"jsonrpc":"2.0","id":5,"result":"0x1"}') == (5, False)
    assert failed(b'{"jsonrpc":"2.0","id":6,"error":{"code":-32000}}') == (6, True)
    assert failed(b"[1]") == (None, True)


def test_http_never_runs_the_one_socket_many_calls_shape_and_baselines_skip_the_mix() -> None:
    t = Target("x", "http://127.0.0.1:1")
    ws, http = Subject("cp WS", t, True, True), Subject("cp HTTP", t, False, True)
    bare = Subject("bare WS", t, True, False)
    one_socket_c32 = SHAPES[1]
    runs = plan_runs([ws, http, bare], one_socket_c32)
    assert all(s is not http for s, _ in runs)
    assert "mix" not in {w for s, w in runs if s is bare}
    assert len(plan_runs([ws, http, bare], SHAPES[0])) == 3 + 3 + 2


def test_rotation_and_urls() -> None:
    assert rotated([1, 2, 3], 1) == [2, 3, 1] and rotated([], 4) == []
    assert ws_url(Target("x", "http://127.0.0.1:9")) == "ws://127.0.0.1:9/rpc/v1/finney"


def test_a_storage_miss_reads_at_the_block_asked() -> None:
    doc = json.loads(body(2, 1.0, 9, ("x", []), "storage", "0x" + "cd" * 32))
    assert doc["params"] == [miss_key(9, 2), "0x" + "cd" * 32]
