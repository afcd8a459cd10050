"""``async-substrate-interface`` (the bittensor SDK's WebSocket client) through
chainproxy over ``ws://``, on chopsticks: its own WebSocket manager, many calls
in flight on one socket, a batch, a refused write, a subscription. It runs in a
venv of its own (``.venv-asi``, ``make asi-deps``): its ``scalecodec`` cannot
share one with substrate-interface's. Without that venv the test is skipped,
saying why."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.clients.chopsticks_stack import ChainStack
from tests.e2e.harness import REPO
from tests.e2e.helpers import next_client_ip

ASI_PYTHON = REPO / ".venv-asi" / "bin" / "python"
ASI_READY = REPO / ".venv-asi" / ".installed"
CLIENT = Path(__file__).parent / "asi" / "client.py"


@pytest.fixture(scope="module")
def asi_python() -> Path:
    if not ASI_READY.exists():
        pytest.skip("async-substrate-interface venv missing: run `make asi-deps`")
    return ASI_PYTHON


def test_bittensor_sdk_websocket_client_through_the_proxy(
    both_endpoints: ChainStack, asi_python: Path, tmp_path: Path
) -> None:
    chain = both_endpoints
    best = chain.node.new_blocks(1)
    chain.wait_all_synced()
    node = chain.node  # chopsticks itself: the truth
    ws_url = chain.rpc_url.replace("http://", "ws://", 1)
    run = subprocess.run(
        [str(asi_python), str(CLIENT), ws_url, next_client_ip()],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,  # its on-disk caches stay in the test's directory
        env={**os.environ, "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)},
    )
    line = next((x for x in run.stdout.splitlines() if x.startswith("ASIJSON ")), None)
    assert line is not None, run.stdout[-3000:] + run.stderr[-3000:]
    out = json.loads(line[len("ASIJSON ") :])

    assert out["missing"] == [], out
    answers = {k: v for k, v in out.items() if k not in ("ids", "missing")}
    for key, answer in answers.items():  # each answer carries the client's own id
        assert str(answer["id"]) == out["ids"][key], (key, answer)
    assert answers["chain"]["result"] == node.rpc("system_chain")
    for n in range(4):
        assert answers[f"hash{n}"]["result"] == node.rpc("chain_getBlockHash", [n])
    assert int(answers["head"]["result"]["number"], 16) == best
    assert answers["version"]["result"]["specName"] == "statemine"
    assert answers["batch0"]["result"] == node.rpc("system_name")
    assert answers["batch1"]["result"] == node.rpc("chain_getBlockHash", [1])
    # a write is refused with the proxy's JSON-RPC error and its reason
    write = answers["write"]["error"]
    assert write["code"] == -32601 and write["data"]["policy"] == "allowlist"
    assert chain.node.rpc("author_pendingExtrinsics") == []
    # a read subscription is served (the node-wss endpoints): its id, as from a node
    # (what it delivers: test_subscriptions_asi.py)
    sub = answers["subscribe"]
    assert "error" not in sub, sub
    assert isinstance(sub["result"], str) and sub["result"]
