"""Several async-substrate-interface clients syncing at once after each new block
(``tests/clients/asi/sync_client.py``, one process each, in ``.venv-asi``),
with the JSON-RPC calls counted where they reach chopsticks: at the counting
endpoint fronts (``tests/clients/counting.py``). Shared by
``test_sync_upstream_call_counts.py`` and ``bench/real_client_sync.py``.

A *run* is: start the clients against one WebSocket URL (a front itself:
direct to the node; or a proxy), let them connect, then ``blocks`` times make a
block (``dev_newBlock``, straight to chopsticks), tell every client to sync
and wait for all of them. Upstream calls are the fronts' ``rpc`` counts over
the run's blocks (the sidecar's probes are counted apart, by User-Agent);
client calls are what the clients counted on their own sockets.

Nothing here expects chopsticks to be quick: one node runs the runtime for
every call, one at a time, so a block's burst of runtime calls can queue for
tens of seconds on a loaded machine. The proxies get ``PATIENT_FAILOVER`` (the
default 5 s attempt and 15 s deadline cut such a sync off with "deadline of
15s passed before an upstream answered", and a timed-out attempt sent the call
again, to the same node, adding to its queue and to the counts), and a client
is waited for until it answers or exits: ``HANG_S`` only says it hung.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import os
import subprocess
import threading
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from addon.chain.head_pinning import pin
from addon.rpc.jsonrpc import Call
from tests.clients.chopsticks_stack import ChainStack
from tests.clients.helpers import LineReader
from tests.e2e.harness import REPO, Stack

ASI_PYTHON = REPO / ".venv-asi" / "bin" / "python"
ASI_READY = REPO / ".venv-asi" / ".installed"
SYNC_CLIENT = Path(__file__).parent / "asi" / "sync_client.py"
# coalescing, head pinning and hedging off; the edge cache stays on, as in every deployment
FEATURES_OFF: dict[str, Any] = {
    "coalesce": {"enabled": False},
    "head_pinning": {"enabled": False},
    "hedge": {"enabled": False},
}
# The failover settings of the proxies whose upstream calls are counted: the
# attempt timeout and the deadline guard against a hung node, never against a
# slow one (the endpoints are one chopsticks: another attempt cannot be quicker).
PATIENT_FAILOVER: dict[str, Any] = {
    "max_attempts": 3,
    "attempt_timeout_s": 300,
    "deadline_s": 600,
    "eject_after": 3,
    "eject_cooldown_s": 2,
}
HANG_S = 600.0  # a client that printed nothing for this long (and is alive) is hung
# every client of every run has a source address of its own (its own quota)
_client_ips = (f"127.9.{i // 250}.{i % 250 + 2}" for i in itertools.count())


@dataclass
class Run:
    name: str
    clients: int
    blocks: int
    client_calls: Counter[str] = field(default_factory=Counter)
    upstream_calls: Counter[str] = field(default_factory=Counter)
    sync_seconds: list[float] = field(default_factory=list)
    # per sync: {"block": (number, hash), "client": i, ...what the client reported}
    syncs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return [f"client {s['client']}: {s['error']}" for s in self.syncs if "error" in s]

    def share(self) -> float:
        """Upstream ÷ client calls."""
        return sum(self.upstream_calls.values()) / max(1, sum(self.client_calls.values()))

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "clients": self.clients,
            "blocks": self.blocks,
            "client_calls": dict(self.client_calls),
            "upstream_calls": dict(self.upstream_calls),
            "sync_seconds": self.sync_seconds,
            "errors": self.errors,
        }


class SyncClient:
    """One client process: its "@@ {json}" steps, read by a thread."""

    def __init__(self, url: str, cwd: Path) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [str(ASI_PYTHON), str(SYNC_CLIENT), url, next(_client_ips)],
            cwd=cwd,  # its on-disk caches stay in the run's directory
            env={**os.environ, "HOME": str(cwd), "XDG_CACHE_HOME": str(cwd)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        self.lines = LineReader(self.proc.stdout)

    def step(self, name: str, timeout: float = HANG_S) -> dict[str, Any]:
        """The client's next step, once it prints it (or an error if it exits first)."""
        if not self.lines.wait_for("@@ ", timeout):
            exited = self.proc.poll()
            why = f"exited ({exited})" if exited is not None else f"hung for {timeout:g}s"
            raise RuntimeError(f"sync client: no {name!r} step, {why}:\n{self.lines.text}")
        doc = json.loads(self.lines.lines[-1].split("@@ ", 1)[1])
        if doc["step"] != name:
            raise RuntimeError(f"sync client: {doc['step']!r} instead of {name!r}")
        return doc

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def quit(self) -> None:
        """Ask it to close its connection and exit (``stopped`` waits for that)."""
        if self.proc.poll() is None:
            try:
                self.send("quit")
            except OSError:
                self.proc.kill()

    def stopped(self) -> None:
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


class HeadObserver:
    """A new-heads subscription on the run's URL, read by a thread of its own,
    so a run can wait until the URL has announced a block before its clients
    sync at it.

    Through chainproxy this is what makes "the block the sync ran on" exact:
    chainproxy answers ``chain_getHead`` with the head its shared new-heads
    subscription last delivered, and a notification reaches the head book
    before any subscriber (``SharedSubscription._deliver``). Without the wait a
    client could ask in the milliseconds between ``dev_newBlock`` and the
    notification, and get the block before, as a client of a node that has not
    imported the block yet would. The subscription is opened before the run's
    counts start, so it adds no upstream call to them; through chainproxy it is
    one more subscriber of the shared subscription (as any dashboard or SDK
    block waiter is), so the proxy's head watch need not open its own."""

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        self.url = url
        self.highest = -1
        self.error: BaseException | None = None
        self._changed = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="head observer")
        self._thread.start()
        if not self.wait_for(0, timeout):
            self.close()
            raise RuntimeError(f"head observer: no head from {url} in {timeout:g}s: {self.error}")

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # reported to the waiting test
            self.error = e
        with self._changed:
            self._changed.notify_all()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        sub = {"jsonrpc": "2.0", "id": 1, "method": "chain_subscribeNewHeads", "params": []}
        async with aiohttp.ClientSession() as s, s.ws_connect(self.url) as ws:
            await ws.send_str(json.dumps(sub))
            reader = asyncio.ensure_future(self._read(ws))
            stop = asyncio.ensure_future(self._stop.wait())
            await asyncio.wait({reader, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            reader.cancel()

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for msg in ws:
            doc = json.loads(msg.data)
            header = doc.get("params", {}).get("result") if isinstance(doc, dict) else None
            if isinstance(header, dict) and "number" in header:
                with self._changed:
                    self.highest = max(self.highest, int(header["number"], 16))
                    self._changed.notify_all()
        raise RuntimeError(f"head observer: {self.url} closed the socket")

    def wait_for(self, number: int, timeout: float = HANG_S) -> bool:
        """True once a head numbered ``number`` or higher was announced."""
        with self._changed:
            return (
                self._changed.wait_for(
                    lambda: self.highest >= number or not self._thread.is_alive(), timeout
                )
                and self.highest >= number
            )

    def close(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread.is_alive():
            loop.call_soon_threadsafe(stop.set)
        self._thread.join(10)


def stop_all(procs: list[SyncClient]) -> None:
    """Every client told to quit first, then waited for: they exit together."""
    for p in procs:
        p.quit()
    for p in procs:
        p.stopped()


def upstream_counts(chain: ChainStack) -> Counter[str]:
    """Calls that reached the node through any front, the probes' left out."""
    total: Counter[str] = Counter()
    for front in chain.fronts:
        total.update(front.counts()["rpc"])
    return total


def run_syncs(
    chain: ChainStack, name: str, url: str, clients: int, blocks: int, workdir: Path
) -> Run:
    """One run against ``url`` (a WebSocket URL)."""
    run = Run(name, clients, blocks)
    procs = [SyncClient(url, workdir / f"{name.replace(' ', '-')}-{i}") for i in range(clients)]
    heads = None
    try:
        heads = HeadObserver(url)
        for p in procs:  # they connect in parallel; each waits here in turn
            p.step("ready")
        before = upstream_counts(chain)
        for b in range(blocks):
            number = chain.node.new_blocks(1)
            block = (number, chain.node.rpc("chain_getBlockHash", [number]))
            if not heads.wait_for(number):  # the URL has announced it (HeadObserver)
                raise RuntimeError(f"{name}: #{number} never announced: {heads.error}")
            for p in procs:  # all at once: the line is all they wait for
                p.send(f"sync {b}")
            for i, p in enumerate(procs):
                doc = p.step("sync")
                run.client_calls.update(doc["calls"])
                run.sync_seconds.append(doc["seconds"])
                run.syncs.append({**doc, "client": i, "block": block})
        # a call is counted as the front reads it, before its answer exists
        run.upstream_calls = upstream_counts(chain) - before
    finally:
        stop_all(procs)
        if heads is not None:
            heads.close()
    return run


def wrong_answers(chain: ChainStack, run: Run) -> list[str]:
    """Every client answer of ``run`` checked against chopsticks itself at the
    block the sync ran on: the head is that block, a read sent without a hash
    answers what the same read asks at that block's hash, anything else what
    the same call asks. Empty when all are right."""
    wrong: list[str] = []
    truth: dict[str, Any] = {}
    for sync in run.syncs:
        number, block_hash = sync["block"]
        if sync.get("head") != block_hash:
            wrong.append(f"client {sync['client']} at #{number}: head {sync.get('head')}")
        for answer in sync["answers"]:
            method, params = answer["method"], answer["params"]
            if method == "chain_getHead":
                expected: Any = {"result": block_hash}
            else:
                pinned = pin(Call(1, method, params), block_hash)
                ask = pinned.params if pinned is not None else params
                key = json.dumps([method, ask])
                if key not in truth:
                    truth[key] = _direct(chain, method, ask)
                expected = truth[key]
            got = {k: answer[k] for k in ("result", "error") if k in answer}
            if got != expected:
                wrong.append(
                    f"client {sync['client']} at #{number}: {method} {params}: "
                    f"{str(got)[:200]} != {str(expected)[:200]}"
                )
    return wrong


def _direct(chain: ChainStack, method: str, params: Any) -> dict[str, Any]:
    """chopsticks' answer (result or error) to one call, asked directly."""
    doc = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    req = urllib.request.Request(
        chain.node.url, json.dumps(doc).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        answer = json.loads(resp.read())
    return {k: answer[k] for k in ("result", "error") if k in answer}


def start_features_off_proxy(chain: ChainStack, tmp: Path) -> ChainStack:
    """A second mitmdump with ``FEATURES_OFF``, on the same sidecar and endpoints,
    with a data directory (edge cache) of its own; it has settled on the fast
    endpoint when this returns. ``.stack.stop()`` stops only it."""
    config = copy.deepcopy(chain.stack.config)
    config["proxy"].update(FEATURES_OFF)
    config["data_dir"] = str(tmp / "data")
    tmp.mkdir(parents=True, exist_ok=True)
    stack = Stack(tmp)
    stack.write_config(config)
    stack.sidecar_url = chain.stack.sidecar_url
    try:
        stack.start_proxy()
        off = ChainStack(stack, chain.node, chain.fronts)
        off.prefer_fast()
    except BaseException:
        stack.stop()
        raise
    return off


def run_all(chain: ChainStack, clients: int, blocks: int, workdir: Path) -> list[Run]:
    """The three runs, in this order: direct to the node (through the fast front),
    through chainproxy with the features off, through chainproxy as configured."""
    off = start_features_off_proxy(chain, workdir / "proxy-off")
    try:
        return [
            run_syncs(chain, "direct", chain.fast.ws_url, clients, blocks, workdir),
            run_syncs(chain, "features off", off.ws_rpc_url, clients, blocks, workdir),
            run_syncs(chain, "chainproxy", chain.ws_rpc_url, clients, blocks, workdir),
        ]
    finally:
        off.stack.stop()
