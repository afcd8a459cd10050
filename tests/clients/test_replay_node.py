"""The replay node's matching (``Recording.answer``), without a server: how
seeds recorded at different heads make one consistent node."""

from __future__ import annotations

from typing import Any

from common.config.model import FINNEY_GENESIS
from tests.clients.replay_node import Recording, load

HEAD = "0x" + "aa" * 32  # the head seed's head
OLD = "0x" + "bb" * 32  # another seed's head
KEY = "0x" + "11" * 40


def header(number: int) -> dict[str, Any]:
    return {"parentHash": "0x" + "00" * 32, "number": hex(number), "digest": {"logs": []}}


def seed(head: str, number: int, value: str) -> dict[str, Any]:
    return {
        "chain_getHead": {"[]": {"result": head}},
        "chain_getHeader": {f'["{head}"]': {"result": header(number)}},
        "state_getRuntimeVersion": {f'["{head[:-2]}00"]': {"result": {"specVersion": number}}},
        "state_getStorageAt": {f'["{KEY}", null]': {"result": value}},
        "state_call": {'["Api_f", "0x0100"]': {"result": value}},
    }


def recording() -> Recording:
    doc = {"seeds": {"now": seed(HEAD, 200, "0x02"), "then": seed(OLD, 100, "0x01")}}
    meta = {"results": {"Metadata_metadata_at_version": "0x15"}}
    return Recording.load(doc, meta, head_seed="now")


def test_reads_without_a_block_are_the_head_seeds_and_others_stay_at_their_own_head() -> None:
    rec = recording()
    assert rec.answer("state_getStorage", [KEY]) == {"result": "0x02"}
    assert rec.answer("state_getStorageAt", [KEY, None]) == {"result": "0x02"}
    assert rec.answer("state_getStorage", [KEY, HEAD]) == {"result": "0x02"}
    assert rec.answer("state_getStorage", [KEY, OLD]) == {"result": "0x01"}
    # a runtime call's bytes with or without 0x, block hashes in any case
    assert rec.answer("state_call", ["Api_f", "0100", OLD.upper().replace("X", "x")]) == {
        "result": "0x01"
    }
    assert rec.conflicts == []


def test_chain_facts_follow_the_recorded_headers() -> None:
    rec = recording()
    assert rec.answer("chain_getHead", []) == {"result": HEAD}
    assert rec.answer("chain_getFinalizedHead", []) == {"result": HEAD}
    assert rec.answer("chain_getBlockHash", [100]) == {"result": OLD}
    assert rec.answer("chain_getBlockHash", [0]) == {"result": FINNEY_GENESIS}
    assert rec.answer("chain_getBlockHash", [150]) is None  # not in the recording (not "never had")
    assert rec.answer("chain_getHeader", [])["result"]["number"] == hex(200)
    assert rec.answer("state_getRuntimeVersion", [OLD]) == {"result": {"specVersion": 100}}
    assert rec.answer("state_call", ["Metadata_metadata_at_version", "0x0f000000"]) == {
        "result": "0x15"
    }
    assert rec.answer("state_getStorage", ["0x99"]) is None  # not recorded: a miss


def test_the_vendored_recording_is_one_consistent_chain() -> None:
    rec = load()
    assert rec.conflicts == []
    assert int(rec.headers[rec.head]["number"], 16) == 6852690
    assert rec.answer("chain_getBlockHash", [6852690]) == {"result": rec.head}
