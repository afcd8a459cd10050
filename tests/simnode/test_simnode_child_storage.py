"""The simulated node's child tries: ``childstate_getStorageEntries`` and
``childstate_getKeysPaged``, deterministic like its main trie and apart from
it, checked like its other state reads."""

from __future__ import annotations

import pytest

from simnode.chain import Chain, ChainConfig
from simnode.rpc import Dispatcher, RpcError
from tests.fakes import FakeClock
from tests.simnode.helpers import EPOCH

CHILD = "0x" + b":child_storage:default:".hex() + "c0de"


def _node() -> tuple[Dispatcher, str]:
    chain = Chain(ChainConfig(epoch=EPOCH, start_height=1000), FakeClock(EPOCH))
    return Dispatcher(chain), chain.block_hash(1000)


def test_child_values_are_the_nodes_own_and_differ_from_the_main_trie() -> None:
    d, at = _node()
    values = d.call("childstate_getStorageEntries", [CHILD, ["0x01", "0x02"], at])
    assert len(values) == 2 and all(v.startswith("0x") for v in values) and values[0] != values[1]
    assert values == d.call("childstate_getStorageEntries", [CHILD, ["0x01", "0x02"]])
    main = d.call("state_getStorage", ["0x01", at])
    assert values[0] != main
    other = d.call("childstate_getStorageEntries", [CHILD + "00", ["0x01"], at])
    assert other[0] != values[0]


def test_child_keys_page_like_the_main_tries() -> None:
    d, at = _node()
    keys = d.call("childstate_getKeysPaged", [CHILD, "0xaa", 10, None, at])
    assert len(keys) == 10 and keys == sorted(keys) and all(k.startswith("0xaa") for k in keys)
    rest = d.call("childstate_getKeysPaged", [CHILD, "0xaa", 100, keys[-1], at])
    assert len(rest) == 54 and rest[0] > keys[-1]


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("childstate_getStorageEntries", [CHILD, "0x01"]),
        ("childstate_getStorageEntries", ["zz", ["0x01"]]),
        ("childstate_getKeysPaged", []),
        ("childstate_getKeysPaged", ["zz", "0x", 1]),
        ("childstate_getKeysPaged", [CHILD, "0x", 5000]),
    ],
)
def test_bad_params_are_refused(method: str, params: list[object]) -> None:
    d, _ = _node()
    with pytest.raises(RpcError) as e:
        d.call(method, params)
    assert e.value.code == -32602


def test_an_unknown_block_is_the_nodes_error() -> None:
    d, _ = _node()
    with pytest.raises(RpcError) as e:
        d.call("childstate_getStorageEntries", [CHILD, ["0x01"], "0x" + "ee" * 32])
    assert "UnknownBlock" in e.value.message
