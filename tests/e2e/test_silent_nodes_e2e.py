"""Nodes that go quiet, through real processes: the node holding a client's
subscriptions is muted (the simulator's ``mute``: socket open, calls and
pings answered, nothing pushed) while the two others push every block. Within
about two block times (``stall_s``) every subscription on its socket moves:
the client's heads stay contiguous, its finalized heads, runtime version and
storage subscriptions go on, the node is marked silent (a ``silent`` incident
in the sidecar, ``chainproxy_upstream_silent_total``) and keeps one canary
subscription until it pushes again."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from common.endpoint_id import endpoint_id
from tests.e2e.harness import Node, Stack, base_config
from tests.e2e.helpers import (
    PROXY_DEFAULTS,
    Client,
    metric_value,
    metrics_text,
    next_client_ip,
    wait_until,
    with_wss,
)

pytestmark = pytest.mark.e2e

BLOCK_S = 1.0
STALL_S = 2 * BLOCK_S  # two block times, as the default's 24 s are for Bittensor's 12 s
KEY = "0x26aa394eea5630e07c48ae0c9558cef702a5c1b19ab7a04f536c519aca4983ac"


@pytest.fixture
def quiet(tmp_path: Any) -> Iterator[Stack]:
    stack = Stack(tmp_path)
    try:
        epoch = time.time() - 600
        for name in ("alpha", "beta", "gamma"):
            stack.start_node(name, epoch=epoch, block_time=BLOCK_S)
        websocket = {"stall_s": STALL_S, "upstream_linger_s": 1}
        config = base_config(
            tmp_path,
            stack.nodes,
            top={"probe": {"interval_s": 2, "head_interval_s": 1, "timeout_s": 2}},
            **{**PROXY_DEFAULTS, "websocket": websocket},
        )
        stack.write_config(with_wss(config))
        stack.start_sidecar()
        stack.start_proxy()
        yield stack
    finally:
        stack.stop()


@asynccontextmanager
async def client(stack: Stack) -> AsyncIterator[Client]:
    url = stack.rpc_url().replace("http://", "ws://")
    connector = aiohttp.TCPConnector(local_addr=(next_client_ip(), 0))
    async with aiohttp.ClientSession(connector=connector) as s, s.ws_connect(url) as ws:
        c = Client(ws)
        yield c
        c._reader.cancel()


def held(stack: Stack) -> dict[str, int]:
    """Subscriptions each node holds now (the proxy's, upstream)."""
    return {n.name: n.state()["subscriptions"] for n in stack.nodes}


def numbers(headers: list[Any]) -> list[int]:
    return [int(h["number"], 16) for h in headers]


def wss_id(node: Node) -> str:
    return endpoint_id(node.url.replace("http://", "ws://"))


async def test_a_muted_node_loses_its_subscriptions_and_is_marked_silent(quiet: Stack) -> None:
    alpha, beta, gamma = quiet.nodes
    for other in (beta, gamma):  # while the client subscribes, only alpha takes subscriptions
        other.control(http_status=503)
    async with client(quiet) as c:
        heads = (await c.ask("chain_subscribeNewHeads"))["result"]
        finalized = (await c.ask("chain_subscribeFinalizedHeads"))["result"]
        runtime = (await c.ask("state_subscribeRuntimeVersion"))["result"]
        storage = (await c.ask("state_subscribeStorage", [[KEY]]))["result"]
        for other in (beta, gamma):
            other.control(http_status=None)
        assert held(quiet) == {"alpha": 4, "beta": 0, "gamma": 0}
        await c.wait_notes(heads, 2)
        await c.wait_notes(runtime, 1)
        seen_heads, seen_final = len(c.notes[heads]), len(c.notes.get(finalized, []))
        await c.wait_notes(storage, 1)

        alpha.control(mute=True)  # open, answering, silent
        # eight more heads, each late by about the stall at most: bounded here
        await c.wait_notes(heads, seen_heads + 8, timeout=8 * BLOCK_S + STALL_S + 6)
        ns = numbers(c.notes[heads])
        assert ns == list(range(ns[0], ns[0] + len(ns))), ns  # contiguous: no gap, no twice
        await c.wait_notes(finalized, seen_final + 3)
        fs = numbers(c.notes[finalized])
        assert fs == list(range(fs[0], fs[0] + len(fs))), fs
        # every subscription left alpha's socket but the canary (the runtime
        # version's and the storage's too: their values, unchanged, are not sent again)
        after = await wait_until(
            lambda: (h := held(quiet))["alpha"] == 1 and sum(h.values()) == 5 and h,
            10,
            "every subscription moved off the silent node but its canary",
        )
        assert after["beta"] + after["gamma"] == 4
        assert alpha.state()["muted_notifications"] > 0  # it was asked to push, and did not

        async def reported() -> bool:  # the next usage batch, then the sidecar's reconcile
            async with (
                aiohttp.ClientSession() as s,
                s.get(f"{quiet.sidecar_url}/api/v1/incidents") as r,
            ):
                doc = json.loads(await r.text())
            return any(
                wss_id(alpha) in json.dumps(i)
                and i["message"] == "silent"
                and i["state"] != "resolved"
                for i in doc["incidents"]
            )

        await wait_until(reported, 20, "a silent incident for alpha's node-wss endpoint", step=0.3)
        text = metrics_text(quiet.sidecar_url)
        assert metric_value(text, "chainproxy_upstream_silent_total", endpoint=wss_id(alpha)) >= 1

        alpha.control(mute=False)  # it pushes again: the canary hears it and is ended
        await wait_until(lambda: held(quiet)["alpha"] == 0, 10, "the canary ended on alpha")
