"""A pre-warm read of a kind known to answer large is a heavy read, as a
client's is after ``reserve_bytes``: in the heavy lane and never hedged (a
race would double its bytes). Scenario 17 found every hedge of its polling
phases on the pre-warm's ``get_all_dynamic_info``: the pre-warm's steps had
no byte reservation, so nothing marked it heavy. It is still charged to
nobody: no quota unit is taken."""

from __future__ import annotations

from addon.hooks.prewarm import CLIENT, ahead
from addon.pipeline.context import RpcContext
from addon.quota.local import Decision
from addon.rpc.jsonrpc import Call, Parsed
from tests.addon.helpers import make

H = "0x" + "ab" * 32
HEAVY = Call(0, "state_call", ["SubnetInfoRuntimeApi_get_all_dynamic_info", "0x", H])
LIGHT = Call(0, "state_getStorage", ["0x01", H])


class _Live:
    live = True


def _ahead(rt: object, call: Call) -> RpcContext:
    rpc = RpcContext("finney", 0.0, _Live(), client=CLIENT, background=True)
    rpc.parsed = Parsed((call,), is_batch=False)
    rpc.answers = [None]
    ahead(rpc, rt)  # type: ignore[arg-type]
    return rpc


def test_a_prewarm_read_of_a_large_kind_is_heavy_and_charged_to_nobody() -> None:
    _, _, rt = make()
    assert _ahead(rt, HEAVY).reserved is None  # its size not learned yet: light
    rt.sizes.learn(HEAVY, 200_000, 65_536)  # ~195 KiB answers
    rpc = _ahead(rt, HEAVY)
    assert rpc.reserved == {0: 3}  # (200,000 - 65,536) / 65,536, rounded up
    assert _ahead(rt, LIGHT).reserved is None
    left = rt.quotas.decide(CLIENT, 0, take=False)
    assert isinstance(left, Decision) and left.remaining == left.limit  # no unit taken


def test_with_byte_costs_off_nothing_is_heavy_as_for_a_client() -> None:
    _, _, rt = make(rate_limit={"costs": {"enabled": False}})
    rt.sizes.learn(HEAVY, 200_000, 65_536)
    assert _ahead(rt, HEAVY).reserved is None
