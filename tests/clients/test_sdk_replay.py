"""Real finney data: the bittensor SDK (PyPI 11.3.0, ``.venv-bt``) reads the
same answers directly from a node and through chainproxy.

The node is ``tests/clients/replay_node.py``: it serves the finney WebSocket
traffic the SDK recorded for its own integration tests (``tests/clients/recordings``,
source commit and licence in the README there), on HTTP and WebSocket on one
port, so chainproxy uses it as both a node-rpc and a node-wss endpoint (with
finney's genesis configured: the probes check it). The SDK client
(``tests/clients/bt/replay_client.py``) makes its reads at the blocks the
recording covers: head and finalized block, spec version, a balance, a
hotkey's netuids and uid, four hyperparameters, blocks since a neuron's last
update and subnet 1's 1,024 lite neurons (a 186 kB runtime-API answer), pinned
and at the head. It runs twice, each time with an empty SDK disk cache: once
against the node, then twice through mitmdump + sidecar (the second time the
proxy's cache is warm). Every result must be equal (and no read may fail); two
are pinned to the values the SDK's own tests expect. A second test sends each
recorded request as raw JSON-RPC over HTTP, one by one twice and in one batch:
the proxy answers as the node does.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from common.config.model import FINNEY_GENESIS
from tests.clients.replay_node import load
from tests.e2e.harness import REPO, Stack, free_port, wait_http
from tests.e2e.helpers import next_client_ip

BT_PYTHON = REPO / ".venv-bt" / "bin" / "python"
BT_READY = REPO / ".venv-bt" / ".installed"
CLIENT = Path(__file__).parent / "bt" / "replay_client.py"
NETWORK = "finney"
HEAD = 6852690  # the replay node's head: the SDK's "metagraph" recording

pytestmark = pytest.mark.skipif(
    not BT_READY.exists(),
    reason="bittensor SDK venv missing: run `make bt-deps` (bittensor==11.3.0)",
)


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    """The replay node, the sidecar and mitmdump on it: (stack, node URL)."""
    tmp = tmp_path_factory.mktemp("replay")
    stack = Stack(tmp)
    try:
        port = free_port()
        node = stack.spawn(
            "replay-node",
            [str(REPO / ".venv" / "bin" / "python"), "-m", "tests.clients.replay_node",
             "--port", str(port)],
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/replay/stats", node)
        stack.write_config(proxy_config(tmp / "data", url, sidecar_port=free_port()))
        stack.start_sidecar()
        stack.start_proxy()
        wait_healthy(stack)
        yield stack, url
    finally:
        stack.stop()


def proxy_config(data_dir: Path, url: str, *, sidecar_port: int) -> dict[str, Any]:
    """/rpc/v1/finney from one replay node, as node-rpc (http://) and node-wss (ws://)."""
    endpoint = {"provider": "replay", "network": NETWORK}
    return {
        "proxy": {"networks": [NETWORK]},
        "sidecar": {
            "host": "127.0.0.1",
            "port": sidecar_port,
            "url": f"http://127.0.0.1:{sidecar_port}",
        },
        "data_dir": str(data_dir),
        "probe": {"interval_s": 5, "head_interval_s": 1, "timeout_s": 3},
        "networks": {NETWORK: {"max_lag_blocks": 3, "genesis": FINNEY_GENESIS}},
        "registry": {
            "endpoints": [
                {**endpoint, "url": url, "kind": "node-rpc"},
                {**endpoint, "url": url.replace("http://", "ws://"), "kind": "node-wss"},
            ]
        },
    }


def wait_healthy(stack: Stack, timeout: float = 30.0) -> None:
    """Both endpoints probed healthy at the replay head, and the addon caught up."""
    doc: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            routes = f"{stack.sidecar_url}/api/v1/internal/routes/{NETWORK}"
            with urllib.request.urlopen(routes, timeout=5) as resp:
                doc = json.loads(resp.read())
            ups = doc["upstreams"] + doc["ws_upstreams"]
            if len(ups) == 2 and all(u["healthy"] and u["best"] == HEAD for u in ups):
                stack.wait_snapshot_applied(NETWORK)  # the addon's view too
                return
        time.sleep(0.2)
    raise RuntimeError(f"the replay node never got healthy: {doc}")


def node_stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/replay/stats", timeout=5) as resp:
        return json.loads(resp.read())


def sdk_reads(ws_url: str, home: Path) -> dict[str, Any]:
    """The client's results (in a HOME of its own: no metadata cached on disk)."""
    home.mkdir()
    argv = [str(BT_PYTHON), str(CLIENT), ws_url, next_client_ip()]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, env={"HOME": str(home)}, cwd=home
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("@@ ")]
    assert lines, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    doc = json.loads(lines[-1][3:])
    assert doc["bittensor"] == "11.3.0"
    return doc["results"]


def test_sdk_reads_of_recorded_finney_are_the_same_through_the_proxy(
    replay: tuple[Stack, str], tmp_path: Path
) -> None:
    stack, node_url = replay
    direct = sdk_reads(node_url.replace("http://", "ws://"), tmp_path / "direct")
    missed_direct = node_stats(node_url)["missed"]
    proxy_ws = stack.rpc_url(NETWORK).replace("http://", "ws://")
    proxied = sdk_reads(proxy_ws, tmp_path / "proxied")
    again = sdk_reads(proxy_ws, tmp_path / "again")  # the proxy's cache is warm now

    failed = {k: v["error"] for k, v in direct.items() if "error" in v}
    assert not failed, failed  # the recording answers every read
    assert direct["block"]["value"] == direct["finalized_block"]["value"] == HEAD
    # what the SDK's own tests expect of these recordings
    assert direct["netuids_for_hotkey"]["value"] == [14]
    assert direct["blocks_since_last_update"]["value"] == 4009702
    assert len(direct["neurons_lite"]["value"]) == 1024
    assert direct["neurons_lite_head"] == direct["neurons_lite"]

    differ = {k: (direct[k], proxied.get(k)) for k in direct if proxied.get(k) != direct[k]}
    assert not differ, {k: (repr(a)[:300], repr(b)[:300]) for k, (a, b) in differ.items()}
    assert proxied == direct
    assert again == direct

    # the stack asked the node nothing the recording lacks, beyond what the SDK
    # itself asks directly (its token-symbol map at connect)
    new_misses = set(node_stats(node_url)["missed"]) - set(missed_direct)
    assert not new_misses, new_misses


def post(url: str, doc: Any, source: str) -> Any:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(
        parts.hostname, parts.port, timeout=20, source_address=(source, 0)
    )
    try:
        conn.request(
            "POST", parts.path or "/", json.dumps(doc), {"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_every_recorded_request_is_answered_the_same_over_http(
    replay: tuple[Stack, str],
) -> None:
    """Each request of the recording as raw JSON-RPC over HTTP, one by one
    (twice: the second pass may come from the proxy's cache) and then all in
    one batch: the proxy's answers are the node's (result or error)."""
    stack, node_url = replay
    proxy_url = stack.rpc_url(NETWORK)
    # rpc_methods is chainproxy's own answer (what it serves, never what it
    # refuses), not the node's: checked apart below
    docs = [
        {"jsonrpc": "2.0", "id": i, "method": method, "params": json.loads(params)}
        for i, (method, params) in enumerate(sorted(load().answers))
        if method != "rpc_methods"
    ]
    _, own = post(proxy_url, {"jsonrpc": "2.0", "id": 0, "method": "rpc_methods"}, "127.0.0.1")
    listed = own["result"]["methods"]
    assert "state_getStorage" in listed and "archive_v1_body" in listed
    assert not [m for m in listed if m.startswith(("author_", "transaction"))], listed
    # a source address per pass: each is a client of its own (quota: 100 a minute)
    want = {d["id"]: answer(post(node_url, d, "127.0.0.1")[1]) for d in docs}
    for rnd in ("first", "again"):
        source = next_client_ip()
        got = {d["id"]: answer(post(proxy_url, d, source)[1]) for d in docs}
        differ = {describe(docs[i]): (want[i], got[i]) for i in want if got[i] != want[i]}
        assert not differ, (rnd, len(differ), len(docs), differ)
    status, batch = post(proxy_url, docs, next_client_ip())
    assert status == 200 and isinstance(batch, list), (status, repr(batch)[:500])
    got = {d.get("id"): answer(d) for d in batch}
    differ = {describe(docs[i]): (want[i], got.get(i)) for i in want if got.get(i) != want[i]}
    assert not differ, ("batch", len(differ), len(docs), differ)


def answer(doc: Any) -> Any:
    """A JSON-RPC answer without its envelope, short enough to print."""
    if not isinstance(doc, dict):
        return repr(doc)[:200]
    got = {k: doc[k] for k in ("result", "error") if k in doc}
    text = json.dumps(got)
    return got if len(text) < 400 else f"{text[:200]}… ({len(text)} chars, {hash(text)})"


def describe(doc: dict[str, Any]) -> str:
    return f"{doc['method']} {json.dumps(doc['params'])[:120]}"
