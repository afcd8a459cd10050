"""The new spec's stateless reads in legacy terms: params read by position
or name and checked (-32602), the legacy call each makes, and the answers
translated (SCALE header, extrinsics, runtime call outcomes, null for an
unknown block, a node's error kept)."""

from __future__ import annotations

from typing import Any

import pytest

from addon.chain.header_hash import encode_header, header_hash
from addon.newspec import translate
from addon.newspec.translate import BadParams
from addon.rpc.jsonrpc import INVALID_PARAMS
from addon.rpc.new_spec import CallFailed
from tests.addon.newspec.fakes import FakeLegacy

H = "0x" + "ab" * 32
UNKNOWN = CallFailed(4003, "Client error: UnknownBlock: Header was not found in the database")


def test_params_by_position_or_by_name() -> None:
    assert translate.args("archive_v1_header", [H]) == [H]
    assert translate.args(
        "archive_v1_call", {"hash": H, "function": "F", "callParameters": "0x"}
    ) == [
        H,
        "F",
        "0x",
    ]
    assert translate.args("archive_v1_storage", [H, []]) == [H, [], None]  # childTrie optional
    cases: list[tuple[str, Any]] = [
        ("archive_v1_header", []),
        ("archive_v1_header", [H, H]),
        ("archive_v1_header", {"hash": H, "other": 1}),
        ("archive_v1_header", "0x"),
        ("archive_v1_storage", [H]),
    ]
    for method, params in cases:
        with pytest.raises(BadParams) as e:
            translate.args(method, params)
        assert e.value.code == INVALID_PARAMS


def test_each_read_is_one_legacy_call() -> None:
    assert translate.legacy_call("archive_v1_header", [H.upper().replace("0X", "0x")]) == (
        "chain_getHeader",
        [H],
    )
    assert translate.legacy_call("archive_v1_body", [H]) == ("chain_getBlock", [H])
    assert translate.legacy_call("archive_v1_call", [H, "Core_version", "0x"]) == (
        "state_call",
        ["Core_version", "0x", H],
    )
    assert translate.legacy_call("archive_v1_hashByHeight", [7]) == ("chain_getBlockHash", [7])
    assert translate.legacy_call("archive_v1_genesisHash", []) == ("chain_getBlockHash", [0])
    assert translate.legacy_call("chainSpec_v1_genesisHash", []) == ("chain_getBlockHash", [0])
    assert translate.legacy_call("chainSpec_v1_chainName", []) == ("system_chain", [])
    assert translate.legacy_call("chainSpec_v1_properties", []) == ("system_properties", [])
    bad: list[tuple[str, list[Any]]] = [
        ("archive_v1_header", ["0x1234"]),
        ("archive_v1_call", [H, "", "0x"]),
        ("archive_v1_call", [H, "F", "0x1"]),
        ("archive_v1_call", [H, "F", "zz"]),
        ("archive_v1_hashByHeight", [-1]),
        ("archive_v1_hashByHeight", [True]),
    ]
    for method, values in bad:
        with pytest.raises(BadParams):
            translate.legacy_call(method, values)


def test_answers_in_the_new_specs_shapes() -> None:
    legacy = FakeLegacy()
    header = legacy.header_at(3)
    encoded = encode_header(header)
    assert encoded is not None
    assert translate.answer("archive_v1_header", header) == "0x" + encoded.hex()
    # asked by its hash: that block's header, or null when the node answered
    # another block's (chopsticks answers an unknown hash with its genesis)
    own = header_hash(header)
    assert own is not None
    assert translate.answer("archive_v1_header", header, [own]) == "0x" + encoded.hex()
    assert translate.answer("archive_v1_header", header, ["0x" + "11" * 32]) is None
    assert header_hash(header) == legacy.hashes[3]  # the SCALE bytes are the block's
    block = legacy._chain_getBlock(legacy.hashes[3])
    assert translate.answer("archive_v1_body", block) == ["0x03", "0xabcd"]
    assert translate.answer("archive_v1_header", None) is None
    assert translate.answer("archive_v1_body", None) is None
    assert translate.answer("archive_v1_call", "0x01") == {"success": True, "value": "0x01"}
    assert translate.answer("archive_v1_hashByHeight", H) == [H]
    assert translate.answer("archive_v1_hashByHeight", None) == []
    assert translate.answer("chainSpec_v1_properties", {"a": 1}) == {"a": 1}
    for method, result in [
        ("archive_v1_header", {"number": "0x1"}),
        ("archive_v1_body", {"block": {}}),
        ("archive_v1_call", None),
        ("archive_v1_genesisHash", None),
    ]:
        with pytest.raises(CallFailed):
            translate.answer(method, result)


def test_failures_where_the_spec_has_an_answer() -> None:
    for method in ("archive_v1_header", "archive_v1_body", "archive_v1_call"):
        assert translate.failed(method, UNKNOWN) is None
    trap = CallFailed(4003, "Client error: Execution failed: wasm trap")
    assert translate.failed("archive_v1_call", trap) == {"success": False, "error": trap.message}
    # not the runtime's: the client gets the error itself
    for err in (
        CallFailed(-32602, "invalid params"),
        CallFailed(-32603, "all upstream attempts failed", {"attempts": []}),
        CallFailed(4003, "Client error: State already discarded for 0x00"),
    ):
        with pytest.raises(CallFailed) as e:
            translate.failed("archive_v1_call", err)
        assert e.value is err
    with pytest.raises(CallFailed):
        translate.failed("chainSpec_v1_chainName", UNKNOWN)
