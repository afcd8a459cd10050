"""What the end-to-end tests share: calls and their replies over HTTP from a
fresh client address each, a stack of nodes + sidecar + proxy, a WebSocket
client with subscriptions, the demo launcher's config and output, and waits
that poll for a condition (``wait_until``) instead of sleeping a fixed time."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.e2e.harness import Stack, base_config, free_port, http_json

_client_ips = (f"127.0.{a}.{b}" for a, b in itertools.product(range(10, 250), range(2, 250)))


def next_client_ip() -> str:
    """A fresh loopback source address: its own rate-limit identity."""
    return next(_client_ips)


@dataclass
class Reply:
    status: int
    headers: Any
    body: Any
    raw: bytes


async def post(
    url: str,
    body: Any,
    *,
    client_ip: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 20.0,
    session: aiohttp.ClientSession | None = None,
) -> Reply:
    """One POST; on a connection of its own unless ``session`` is given (a
    client keeping its connections alive: its calls cost the proxy and the
    test process no connection set-up each, on a loaded machine too)."""
    if session is None:
        connector = aiohttp.TCPConnector(local_addr=(client_ip or next_client_ip(), 0))
        async with aiohttp.ClientSession(connector=connector) as s:
            return await post(url, body, headers=headers, timeout=timeout, session=s)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with session.post(
        url,
        data=data,
        headers={"Content-Type": "application/json", **(headers or {})},
        timeout=aiohttp.ClientTimeout(total=timeout),
    ) as r:
        raw = await r.read()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        return Reply(r.status, r.headers, parsed, raw)


def client_session(client_ip: str | None = None) -> aiohttp.ClientSession:
    """A client's session from one address, with as many connections alive as
    it has calls in flight."""
    connector = aiohttp.TCPConnector(local_addr=(client_ip or next_client_ip(), 0), limit=0)
    return aiohttp.ClientSession(connector=connector)


def node_calls(stack: Stack, method: str, since: float, agent: str | None = "chainproxy") -> int:
    """Calls of ``method`` the stack's nodes received since ``since``
    (``time.time()``), from their own arrival logs: the proxy's (its
    User-Agent), not the sidecar's probes a slow run fits more of; ``agent``
    None: anyone's."""
    return sum(
        a["methods"].count(method)
        for n in stack.nodes
        for a in n.arrivals(since)
        if agent is None or a["agent"] == agent
    )


def call(method: str, params: Any = None, id_: Any = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": id_,
        "method": method,
        "params": [] if params is None else params,
    }


PROXY_DEFAULTS = {
    "failover": {
        "max_attempts": 3,
        "attempt_timeout_s": 1,
        "deadline_s": 2.5,
        "eject_after": 3,
        "eject_cooldown_s": 1,
    },
}


# the proxy under test reads kept-alive HTTP requests itself (the default, said
# explicitly: a check run's CHAINPROXY_TEST_SETS may turn it off for the rest)
DIRECT_ON = ("chainproxy_http_direct=true",)


def build_stack(
    tmp: Any,
    names: tuple[str, ...],
    *,
    top: dict[str, Any] | None = None,
    sets: tuple[str, ...] = (),
    wss: bool = False,
    block_time: float | None = None,
    **proxy: Any,
) -> Stack:
    """Nodes ``names``, the sidecar and the proxy; ``sets``: mitmdump options;
    ``wss``: each node also a node-wss endpoint (subscriptions); ``block_time``:
    the nodes' (their default otherwise)."""
    stack = Stack(tmp, proxy_sets=sets)
    epoch = time.time() - 600
    node_kw = {} if block_time is None else {"block_time": block_time}
    try:
        stack.wait_nodes(
            [
                stack.start_node(
                    name, epoch=epoch, archive=name.startswith("archive"), wait=False, **node_kw
                )
                for name in names
            ]
        )
        config = base_config(tmp, stack.nodes, top=top, **{**PROXY_DEFAULTS, **proxy})
        stack.write_config(with_wss(config) if wss else config)
        stack.start_sidecar()
        stack.start_proxy()
    except BaseException:
        stack.stop()
        raise
    return stack


def with_wss(config: dict[str, Any]) -> dict[str, Any]:
    """Each simulated node also as a node-wss endpoint (same port, ws://)."""
    rpc = [e for e in config["registry"]["endpoints"] if e["kind"] == "node-rpc"]
    wss = [{**e, "url": e["url"].replace("http://", "ws://"), "kind": "node-wss"} for e in rpc]
    config["registry"]["endpoints"] = rpc + wss
    return config


class Client:
    """One client socket: answers by id, notifications per subscription id."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.answers: dict[Any, Any] = {}
        self.notes: dict[str, list[Any]] = {}
        self.methods: dict[str, str] = {}
        self._ids = iter(range(1, 10**9))
        self._reader = asyncio.get_running_loop().create_task(self._read())
        self._arrived = asyncio.Event()

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            doc = json.loads(msg.data)
            if isinstance(doc, dict) and "params" in doc and "subscription" in doc["params"]:
                sid = doc["params"]["subscription"]
                self.notes.setdefault(sid, []).append(doc["params"]["result"])
                self.methods[sid] = doc["method"]
            else:
                for d in doc if isinstance(doc, list) else [doc]:
                    self.answers[d.get("id")] = d
            self._arrived.set()

    async def ask(self, method: str, params: Any = None, timeout: float = 20) -> Any:
        call_id = next(self._ids)
        await self.ws.send_str(json.dumps(call(method, params, id_=call_id)))
        deadline = time.monotonic() + timeout
        while call_id not in self.answers:
            self._arrived.clear()
            left = deadline - time.monotonic()
            assert left > 0, f"no answer to {method}"
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except TimeoutError:
                pass
        return self.answers.pop(call_id)

    async def wait_notes(self, sid: str, count: int, timeout: float = 20) -> list[Any]:
        deadline = time.monotonic() + timeout
        while len(self.notes.get(sid, [])) < count:
            assert time.monotonic() < deadline, f"{len(self.notes.get(sid, []))}/{count} notes"
            await asyncio.sleep(0.05)
        return self.notes[sid]


def demo_config(tmp: Path) -> Path:
    nodes = [free_port() for _ in range(3)]
    sidecar = free_port()
    doc = {
        "proxy": {"networks": ["finney"]},
        "sidecar": {"port": sidecar, "url": f"http://127.0.0.1:{sidecar}"},
        "data_dir": str(tmp / "data"),
        "registry": {
            "endpoints": [
                {
                    "url": f"http://127.0.0.1:{p}",
                    "provider": f"sim{i}",
                    "kind": "node-rpc",
                    "network": "finney",
                    "archive": i == 2,
                }
                for i, p in enumerate(nodes)
            ]
            + [
                {"url": f"ws://127.0.0.1:{p}", "provider": f"sim{i}", "kind": "node-wss"}
                | {"network": "finney"}
                for i, p in enumerate(nodes)
            ]
        },
    }
    path = tmp / "demo.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def read_until_banner(proc: subprocess.Popen[str], timeout_s: float) -> list[str]:
    """The launcher's output lines up to its banner's last line (or its exit)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "Ctrl-C stops everything" in line:
            break
    return lines


async def two_heads(url: str) -> list[dict[str, object]]:
    """The demo's simulated nodes make blocks: a subscription sees two heads."""
    sub = {"jsonrpc": "2.0", "id": 1, "method": "chain_subscribeNewHeads", "params": []}
    heads: list[dict[str, object]] = []
    async with aiohttp.ClientSession() as s, s.ws_connect(url) as ws:
        await ws.send_str(json.dumps(sub))
        async with asyncio.timeout(30):  # the demo makes a block every few seconds
            while len(heads) < 2:
                doc = json.loads((await ws.receive()).data)
                if doc.get("method") == "chain_newHead":
                    heads.append(doc["params"]["result"])
    return heads


# --- waiting for a condition -------------------------------------------------------------------


async def wait_until(
    cond: Callable[[], Any], timeout: float, what: str, *, step: float = 0.1
) -> Any:
    """Poll ``cond`` (a function or a coroutine function) every ``step`` seconds
    until it returns something true, and return that. After ``timeout`` seconds
    raise ``AssertionError`` naming ``what`` was awaited and the last value seen:
    a wait that times out fails the test, it never lets it go on unproven."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:g} s waiting until {what} (last: {value!r:.300})"
            )
        await asyncio.sleep(step)


# --- the sidecar's /metrics ----------------------------------------------------------------------

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metrics_text(base_url: str) -> str:
    """``GET <base_url>/metrics`` (the sidecar's, or through the proxy)."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as r:
        return r.read().decode()


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels`` in a
    Prometheus text exposition; 0.0 when there is none."""
    total = 0.0
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None or m.group(1) != name:
            continue
        have = dict(_LABEL.findall(m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def usage_refusals(stack: Stack) -> float:
    return metric_value(
        metrics_text(stack.sidecar_url), "chainproxy_refusals_total", policy="allowlist"
    )


async def usage_delivered(stack: Stack, timeout: float = 30.0) -> None:
    """Every usage batch the proxy made so far has reached the sidecar: a call
    refused by the allowlist (counted in the live metrics, not in the usage
    records, from a fresh address: no quota of the test's) is sent now, and its
    refusal is awaited in the sidecar's /metrics. The proxy delivers its batches
    oldest first, so the batch carrying it comes after every earlier one. The
    positive signal a "nothing more arrives" check waits for first."""
    before = usage_refusals(stack)
    r = await post(stack.rpc_url(), call("author_submitExtrinsic", ["0x00"]))
    assert r.status == 403 and r.body["error"]["data"]["policy"] == "allowlist", r.body
    await wait_until(
        lambda: usage_refusals(stack) > before,
        timeout,
        "the usage batch after the test's calls reached the sidecar",
        step=0.2,
    )


def sidecar_routes(stack: Stack, network: str = "finney") -> dict[str, Any]:
    """The routing snapshot the sidecar serves the proxy now."""
    return http_json(f"{stack.sidecar_url}/api/v1/internal/routes/{network}")  # type: ignore[no-any-return]
