"""A runtime upgrade on the simulated node: the ``upgrade_at`` fault (and
``--upgrade-at``), what blocks before and after it answer, and the runtime
version subscription crossing it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from simnode import SimNode
from simnode.__main__ import build_parser
from simnode.command import simnode_argv
from simnode.faults import check_fault
from simnode.runtime import BASE_SPEC, call_result, metadata
from tests.fakes import FakeClock
from tests.simnode.helpers import EPOCH, req

START = 1000
BLOCK_S = 12.0
UPGRADE_AT = START + 3


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(EPOCH)


@pytest.fixture
async def node(clock: FakeClock) -> AsyncIterator[SimNode]:
    n = SimNode(name="rt", clock=clock, epoch=EPOCH, start_height=START, block_time=BLOCK_S)
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


async def rpc(session: aiohttp.ClientSession, node: SimNode, method: str, *params: Any) -> Any:
    async with session.post(node.url, json=req(method, list(params))) as r:
        out = await r.json()
    assert "error" not in out, out
    return out["result"]


async def control(session: aiohttp.ClientSession, node: SimNode, **kw: Any) -> Any:
    async with session.post(node.url + "/_sim/control", json=kw) as r:
        return r.status, await r.json()


def to_height(clock: FakeClock, n: int) -> None:
    clock.t = EPOCH + (n - START) * BLOCK_S + 1


async def test_blocks_before_the_upgrade_keep_their_runtime(
    node: SimNode, clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    status, faults = await control(session, node, upgrade_at=UPGRADE_AT, upgrade_spec=305)
    assert status == 200 and (faults["upgrade_at"], faults["upgrade_spec"]) == (UPGRADE_AT, 305)
    # the head has not reached it: every block so far, and the head, run the old runtime
    assert (await rpc(session, node, "state_getRuntimeVersion"))["specVersion"] == BASE_SPEC
    to_height(clock, UPGRADE_AT + 2)
    old = await rpc(session, node, "chain_getBlockHash", UPGRADE_AT - 1)
    new = await rpc(session, node, "chain_getBlockHash", UPGRADE_AT)
    for at, spec in ((old, BASE_SPEC), (new, 305), (None, 305)):
        params = [] if at is None else [at]
        version = await rpc(session, node, "state_getRuntimeVersion", *params)
        assert (version["specName"], version["specVersion"]) == ("node-subtensor", spec)
        assert await rpc(session, node, "state_getMetadata", *params) == metadata(spec)
    assert metadata(305) != metadata(BASE_SPEC) and metadata(305).startswith("0x6d657461")
    # a runtime API answers per runtime: the same within one, another after the upgrade
    call = ("SubnetInfoRuntimeApi_get_subnet_info", "0x0100")
    before = await rpc(session, node, "state_call", *call, old)
    assert before == call_result(*call)  # what the simulator always answered
    assert before == await rpc(session, node, "state_call", *call, node.chain.block_hash(START))
    after = await rpc(session, node, "state_call", *call, new)
    assert after != before
    assert after == await rpc(session, node, "state_call", *call, None)
    assert node.state()["spec_version"] == 305


async def test_without_an_upgrade_nothing_changes(
    node: SimNode, clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    to_height(clock, START + 50)
    at = await rpc(session, node, "chain_getBlockHash", START + 49)
    assert (await rpc(session, node, "state_getRuntimeVersion", at))["specVersion"] == BASE_SPEC
    assert node.faults.upgrade_at is None and node.state()["spec_version"] == BASE_SPEC


async def test_a_bad_upgrade_is_refused_whole(
    node: SimNode, session: aiohttp.ClientSession
) -> None:
    for bad in (
        {"upgrade_at": 0},
        {"upgrade_at": -5},
        {"upgrade_at": True},
        {"upgrade_at": "1003"},
        {"upgrade_at": 1003.5},
        {"upgrade_spec": BASE_SPEC},  # a spec version only ever goes up
        {"upgrade_spec": 2**32},
        {"upgrade_spec": None},
        {"lag": 2, "upgrade_at": UPGRADE_AT, "upgrade_spec": 1},
    ):
        status, body = await control(session, node, **bad)
        assert status == 400 and "upgrade_" in body["error"], (bad, body)
    assert node.faults.lag == 0 and node.faults.upgrade_at is None
    assert check_fault("upgrade_at", None) is None
    assert check_fault("upgrade_spec", BASE_SPEC + 1) == BASE_SPEC + 1


async def test_a_reset_ends_the_upgrade_but_keeps_the_command_lines(clock: FakeClock) -> None:
    plain = SimNode(clock=clock, epoch=EPOCH, start_height=START)
    plain.set_faults(upgrade_at=START)
    assert plain.chain.spec_version(START) == BASE_SPEC + 1
    plain.reset()
    assert plain.chain.spec_version(START) == BASE_SPEC
    started = SimNode(
        clock=clock, epoch=EPOCH, start_height=START, upgrade_at=START, upgrade_spec=310
    )
    started.set_faults(upgrade_at=None)
    assert started.chain.spec_version(START) == BASE_SPEC
    started.reset()
    assert started.chain.spec_version(START) == 310
    with pytest.raises(ValueError, match="upgrade_spec"):
        SimNode(clock=clock, upgrade_at=5, upgrade_spec=BASE_SPEC)


def test_the_command_line_takes_an_upgrade() -> None:
    args = build_parser().parse_args(["--upgrade-at", "1234", "--upgrade-spec", "302"])
    assert (args.upgrade_at, args.upgrade_spec) == (1234, 302)
    defaults = build_parser().parse_args([])
    assert (defaults.upgrade_at, defaults.upgrade_spec) == (None, BASE_SPEC + 1)
    argv = simnode_argv(
        9, name="a", seed="s", epoch=1.0, block_time=2, start_height=5, upgrade_at=7
    )
    assert argv[-2:] == ["--upgrade-at", "7"]


async def recv(ws: aiohttp.ClientWebSocketResponse, timeout: float = 3.0) -> Any:
    msg = await ws.receive(timeout=timeout)
    assert msg.type is aiohttp.WSMsgType.TEXT, msg
    return json.loads(msg.data)


async def test_the_runtime_subscription_is_told_when_the_head_crosses_the_upgrade(
    node: SimNode, clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    node.set_faults(upgrade_at=UPGRADE_AT)
    async with session.ws_connect(node.url) as ws:
        await ws.send_json(req("state_subscribeRuntimeVersion", rid=1))
        sid = (await recv(ws))["result"]
        first = await recv(ws)
        assert first["method"] == "state_runtimeVersion"
        assert first["params"] == {"subscription": sid, "result": first["params"]["result"]}
        assert first["params"]["result"]["specVersion"] == BASE_SPEC
        to_height(clock, UPGRADE_AT - 1)  # a new head on the old runtime: nothing to tell
        with pytest.raises(TimeoutError):
            await ws.receive(timeout=0.4)
        to_height(clock, UPGRADE_AT)
        upgraded = await recv(ws)
        assert upgraded["params"]["subscription"] == sid
        assert upgraded["params"]["result"]["specVersion"] == BASE_SPEC + 1
        to_height(clock, UPGRADE_AT + 3)  # once: the runtime stays
        with pytest.raises(TimeoutError):
            await ws.receive(timeout=0.4)
