"""Reloads through the real launcher (``python -m chainproxy.launch``), its
simulated nodes, sidecar, HAProxy and Redis (issue 26.2's evidence):

* ``chainproxy reload`` with ``--workers 2`` under steady load (about 100
  HTTP calls a second from six clients on kept-alive connections, ten
  WebSocket subscribers): not one failed HTTP call, both worker processes
  replaced, the new rate limit in force; every WebSocket client closed with
  1001 and subscribed again;
* a bad file (reload command, or SIGHUP to the launcher): refused with the
  one line, the workers untouched;
* with one proxy process, the reload is in place: the same process, the
  subscription goes on without a gap, the quota count goes on, the new config
  (a smaller batch limit) in force, and the sidecar's registry follows the
  file (an endpoint added, one removed)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from chainproxy.reload import read_status
from chainproxy.workers import find_tool
from tests.e2e.harness import REPO, free_port
from tests.e2e.helpers import call, demo_config, next_client_ip, post, wait_until

pytestmark = pytest.mark.e2e

LOAD_TIER = "127.0.77.0/24"  # the load's clients: a quota of their own that the reload keeps
WS_CLIENTS = 10


@dataclass
class Launcher:
    config: Path
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/rpc/v1/finney"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def edit(self, change: dict[str, Any]) -> None:
        doc = yaml.safe_load(self.config.read_text())
        doc["proxy"].update(change)
        self.config.write_text(yaml.safe_dump(doc))

    def reload(self) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "chainproxy.cli", "reload", "--config", str(self.config)]
        return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=90)

    def proxies(self) -> set[int]:
        """The mitmdump processes below the launcher now."""
        return {p for p in _descendants(self.proc.pid) if b"mitmdump" in _cmdline(p)}


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - out
        out |= frontier
    return out


@contextlib.contextmanager
def _launch(tmp: Path, workers: int, proxy: dict[str, Any]) -> Iterator[Launcher]:
    config = demo_config(tmp)
    doc = yaml.safe_load(config.read_text())
    doc["proxy"].update({"drain_s": 5, **proxy})
    config.write_text(yaml.safe_dump(doc))
    port = free_port()
    log = tmp / "launcher.log"
    argv = [sys.executable, "-m", "chainproxy.launch", "--config", str(config), "--simulate"]
    argv += ["--workers", str(workers), "--listen-port", str(port)]
    with log.open("wb") as out:  # a file, not a pipe: the workers log a line per call
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    launcher = Launcher(config, port, proc, log)
    try:
        deadline = time.monotonic() + 60
        while "Ctrl-C stops everything" not in launcher.output():
            assert proc.poll() is None and time.monotonic() < deadline, launcher.output()[-3000:]
            time.sleep(0.1)
        yield launcher
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(30) == 0, launcher.output()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    if find_tool("haproxy") is None or find_tool("redis-server") is None:
        pytest.skip("haproxy and redis-server are installed by `make test` (Debian packages)")
    tier = {"name": "load", "cidrs": [LOAD_TIER], "rate_limit": {"requests": 1_000_000}}
    proxy = {"rate_limit": {"requests": 100_000, "window_s": 60}, "tiers": [tier]}
    with _launch(tmp_path_factory.mktemp("reload-workers"), 2, proxy) as launcher:
        yield launcher


# --- the load ------------------------------------------------------------------------------


@dataclass
class Load:
    url: str
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    ok: int = 0
    ok_at: list[float] = field(default_factory=list)  # time.monotonic() of each answer
    during: tuple[float, float] = (0.0, 0.0)  # when the operation under test began and ended
    failed: list[str] = field(default_factory=list)
    ws_failed: list[str] = field(default_factory=list)  # a subscriber that could not reconnect
    closes: dict[int, list[int | None]] = field(default_factory=dict)  # ws client -> codes
    heads_after: dict[int, int] = field(default_factory=dict)  # heads since its last reconnect

    async def http_client(self, n: int, pause_s: float) -> None:
        """Calls on one kept-alive connection (another after a ``Connection: close``)."""
        connector = aiohttp.TCPConnector(local_addr=(f"127.0.77.{n + 2}", 0))
        async with aiohttp.ClientSession(connector=connector) as s:
            i = 0
            while not self.stopping.is_set():
                i += 1
                method = ("system_health", "chain_getHeader", "chain_getFinalizedHead")[i % 3]
                try:
                    async with s.post(
                        self.url, json=call(method, id_=i), timeout=aiohttp.ClientTimeout(10)
                    ) as r:
                        body = await r.json(content_type=None)
                        if r.status == 200 and "result" in body:
                            self.ok += 1
                            self.ok_at.append(time.monotonic())
                        else:
                            self.failed.append(f"{r.status} {str(body)[:200]}")
                except (aiohttp.ClientError, TimeoutError, ValueError) as e:
                    self.failed.append(repr(e))
                await asyncio.sleep(pause_s)

    async def subscriber(self, n: int) -> None:
        """Subscribes to new heads; subscribes again after each close."""
        self.closes[n] = []
        while not self.stopping.is_set():
            try:
                await self._subscribe(n)
            except (aiohttp.ClientError, TimeoutError) as e:
                self.ws_failed.append(repr(e))
                await asyncio.sleep(0.2)

    async def _subscribe(self, n: int) -> None:
        connector = aiohttp.TCPConnector(local_addr=(f"127.0.77.{100 + n}", 0))
        async with (
            aiohttp.ClientSession(connector=connector) as s,
            s.ws_connect(self.url.replace("http://", "ws://")) as ws,
        ):
            await ws.send_str(json.dumps(call("chain_subscribeNewHeads", id_=1)))
            self.heads_after[n] = 0
            stop = asyncio.ensure_future(self.stopping.wait())
            while True:
                recv = asyncio.ensure_future(ws.receive())
                await asyncio.wait({recv, stop}, return_when=asyncio.FIRST_COMPLETED)
                if stop.done():
                    recv.cancel()
                    return
                msg = recv.result()
                if msg.type != aiohttp.WSMsgType.TEXT:
                    # the close frame's code, as the proxy sent it (``ws.close_code``
                    # turns 1006 when the reply finds the socket already gone)
                    code = msg.data if msg.type == aiohttp.WSMsgType.CLOSE else ws.close_code
                    self.closes[n].append(code)
                    stop.cancel()
                    return
                if json.loads(msg.data).get("method") == "chain_newHead":
                    self.heads_after[n] += 1


async def _under_load(launcher: Launcher, during: Any) -> tuple[Load, Any]:
    load = Load(launcher.url)
    tasks = [asyncio.create_task(load.http_client(n, pause_s=0.04)) for n in range(6)]
    tasks += [asyncio.create_task(load.subscriber(n)) for n in range(WS_CLIENTS)]
    # the load runs before the reload: every subscriber hears the chain, calls flow
    await wait_until(
        lambda: load.ok >= 100 and all(load.heads_after.get(n) for n in range(WS_CLIENTS)),
        30,
        f"the load runs: 100 calls answered and {WS_CLIENTS} subscribers hearing heads",
    )
    assert load.failed == [] and load.ws_failed == [], (load.failed[:5], load.ws_failed[:5])
    began = time.monotonic()
    outcome = await asyncio.to_thread(during)
    load.during = (began, time.monotonic())
    # every subscriber is back and hears the chain again
    async with asyncio.timeout(20):
        while sum(1 for n in range(WS_CLIENTS) if load.heads_after.get(n, 0)) < WS_CLIENTS:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
    load.stopping.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 15)
    return load, outcome


# --- the tests -----------------------------------------------------------------------------


async def test_a_reload_replaces_both_workers_under_load_without_a_failed_call(
    workers: Launcher,
) -> None:
    before = workers.proxies()
    assert len(before) == 2
    workers.edit({"rate_limit": {"requests": 5, "window_s": 60}})
    started = time.monotonic()
    load, done = await _under_load(workers, workers.reload)
    took = time.monotonic() - started
    # calls answered while the workers were replaced (a count, not a rate: how
    # fast depends on how busy the machine is)
    began, ended = load.during
    answered = sum(1 for t in load.ok_at if began <= t <= ended)

    print(  # the evidence, with -s
        f"\nreload under load: {load.ok} HTTP calls answered in {took:.1f} s "
        f"({load.ok / took:.0f}/s; {answered} during the reload's {ended - began:.1f} s), "
        f"{len(load.failed)} failed; WebSocket closes {load.closes}; "
        f"{done.stderr.strip()}"
    )
    assert done.returncode == 0, done.stderr + workers.output()[-3000:]
    assert "reload done: workers replaced one at a time" in done.stderr
    assert load.failed == [], load.failed[:5]
    assert answered >= 10, (answered, ended - began, load.ok)  # the load ran throughout
    after = workers.proxies()
    assert len(after) == 2 and not after & before  # both processes replaced
    # each subscriber was on a worker that went: going away (1001), never 1006
    assert all(codes and set(codes) == {1001} for codes in load.closes.values()), load.closes
    assert load.ws_failed == []  # and subscribed again at once, through HAProxy

    # the new default quota is in force on both workers: 5, then 429
    ip = next_client_ip()
    replies = [await post(workers.url, call("system_health"), client_ip=ip) for _ in range(6)]
    assert [r.status for r in replies] == [200] * 5 + [429]
    assert {r.headers["X-RateLimit-Limit"] for r in replies} == {"5"}


def test_a_bad_file_is_refused_and_nothing_changes(workers: Launcher) -> None:
    pids = workers.proxies()
    good = workers.config.read_text()
    # the quota in force now (whatever a test before reloaded), the same after
    limit = asyncio.run(post(workers.url, call("system_health"))).headers["X-RateLimit-Limit"]
    try:
        workers.edit({"rate_limit": {"requests": -1}})
        done = workers.reload()
        assert done.returncode == 2
        line = done.stderr.strip()
        assert "\n" not in line and "proxy.rate_limit.requests" in line, line
        # straight to the launcher: it checks the file too
        status = Path(yaml.safe_load(good)["data_dir"]) / "run" / "reload.json"
        # no file yet when no reload ran before this test (it is written per reload)
        seq = (read_status(status) or {}).get("seq")
        os.kill(workers.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 30
        while (
            (doc := read_status(status)) is None or doc["seq"] == seq or doc["state"] == "running"
        ):
            assert time.monotonic() < deadline, doc
            time.sleep(0.05)
        assert doc["state"] == "refused" and "proxy.rate_limit.requests" in doc["message"]
    finally:
        workers.config.write_text(good)
    assert workers.proc.poll() is None  # the launcher keeps running ...
    assert workers.proxies() == pids  # ... with the same workers
    reply = asyncio.run(post(workers.url, call("system_health")))
    assert reply.status == 200 and reply.headers["X-RateLimit-Limit"] == limit


async def test_a_single_process_reloads_in_place(tmp_path: Path) -> None:
    with _launch(tmp_path, 1, {"rate_limit": {"requests": 100, "window_s": 60}}) as launcher:
        await _in_place(launcher)


async def _in_place(launcher: Launcher) -> None:
    sidecar = yaml.safe_load(launcher.config.read_text())["sidecar"]["url"]
    pid = launcher.proxies()
    ip = next_client_ip()
    ws_url = launcher.url.replace("http://", "ws://")
    async with aiohttp.ClientSession() as s, s.ws_connect(ws_url) as ws:
        await ws.send_str(json.dumps(call("chain_subscribeNewHeads", id_=1)))
        heads: list[int] = []
        sub_ids: set[str] = set()
        answers: list[dict[str, Any]] = []

        async def read() -> None:
            async for msg in ws:
                doc = json.loads(msg.data)
                if "method" not in doc:
                    answers.append(doc)
                if doc.get("method") == "chain_newHead":
                    sub_ids.add(doc["params"]["subscription"])
                    heads.append(int(doc["params"]["result"]["number"], 16))

        reader = asyncio.create_task(read())
        async with asyncio.timeout(15):
            while not heads:  # noqa: ASYNC110 - the reader fills it
                await asyncio.sleep(0.05)
        ids_before = await _callable_ids(sidecar)
        first = [await post(launcher.url, call("system_health"), client_ip=ip) for _ in range(3)]
        assert [r.headers["X-RateLimit-Remaining"] for r in first] == ["99", "98", "97"]
        batch = [call("system_health", id_=i) for i in range(3)]
        assert (await post(launcher.url, batch, client_ip=next_client_ip())).status == 200

        doc = yaml.safe_load(launcher.config.read_text())
        nodes = [e for e in doc["registry"]["endpoints"] if e["kind"] == "node-rpc"]
        removed = doc["registry"]["endpoints"].pop()  # a node-wss endpoint
        added = {**nodes[0], "url": nodes[0]["url"].replace("127.0.0.1", "localhost")}
        doc["registry"]["endpoints"].append(added)
        doc["proxy"]["max_batch"] = 2
        doc["proxy"]["max_body_bytes"] = 4096
        launcher.config.write_text(yaml.safe_dump(doc))
        done = await asyncio.to_thread(launcher.reload)
        assert done.returncode == 0, done.stderr
        assert "applied in place" in done.stderr

        # the same process; the new batch limit; the quota count goes on
        assert launcher.proxies() == pid
        assert (await post(launcher.url, batch, client_ip=next_client_ip())).status == 413
        later = await post(launcher.url, call("system_health"), client_ip=ip)
        assert later.headers["X-RateLimit-Remaining"] == "96"
        # the new message limit holds on the socket opened before the reload
        answers.clear()
        await ws.send_str(json.dumps({**call("system_health", id_=77), "pad": "x" * 5000}))
        async with asyncio.timeout(10):
            while not answers:  # noqa: ASYNC110 - the reader fills it
                await asyncio.sleep(0.05)
        assert answers[0]["error"]["data"] == {"limit": 4096}, answers
        # the subscription goes on: same id, no gap, no duplicate, not closed
        seen = len(heads)
        async with asyncio.timeout(15):
            while len(heads) < seen + 2:  # noqa: ASYNC110 - the reader fills it
                await asyncio.sleep(0.05)
        assert not ws.closed and len(sub_ids) == 1
        assert heads == list(range(heads[0], heads[0] + len(heads)))
        reader.cancel()

    # the sidecar's registry follows the file, without a restart: the removed
    # endpoint is gone, the added one is there and probed at once
    rows = await _callable_rows(sidecar)
    assert removed["url"] not in {row["url"] for row in rows.values()}
    new = set(rows) - ids_before
    assert len(new) == 1 and len(ids_before - set(rows)) == 1
    (added_id,) = new
    async with asyncio.timeout(10):
        while not (await _callable_rows(sidecar))[added_id]["probed"]:  # noqa: ASYNC110
            await asyncio.sleep(0.2)


async def _callable_rows(sidecar: str) -> dict[str, dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.get(f"{sidecar}/api/v1/endpoints/callable") as r:
        return {row["id"]: row for row in (await r.json())["rows"]}


async def _callable_ids(sidecar: str) -> set[str]:
    return set(await _callable_rows(sidecar))


async def test_a_sidecar_or_proxy_that_dies_is_started_again_and_rpc_goes_on(
    tmp_path: Path,
) -> None:
    """RELIABILITY's "the sidecar killed": under the launcher too, the proxy
    keeps serving, and the launcher starts the sidecar again (it used to stop
    the whole stack)."""
    with _launch(tmp_path, 1, {}) as launcher:
        sidecar_url = yaml.safe_load(launcher.config.read_text())["sidecar"]["url"]

        def sidecars() -> set[int]:
            kids = _descendants(launcher.proc.pid)
            return {p for p in kids if b"-m\x00sidecar" in _cmdline(p)}

        (first,) = sidecars()
        os.kill(first, signal.SIGKILL)
        reply = await post(launcher.url, call("system_health"), client_ip=next_client_ip())
        assert reply.status == 200
        await wait_until(lambda: sidecars() - {first}, 20, "a new sidecar process")

        async def answers() -> bool:
            async with aiohttp.ClientSession() as s:
                try:
                    async with s.get(f"{sidecar_url}/healthz") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

        await wait_until(answers, 30, "the new sidecar answers")
        assert launcher.proc.poll() is None
        assert "sidecar exited" in launcher.output() and "starting it again" in launcher.output()
        reply = await post(launcher.url, call("system_health"), client_ip=next_client_ip())
        assert reply.status == 200

        # the one proxy process too: started again on its port, from the same file
        (proxy,) = launcher.proxies()
        os.kill(proxy, signal.SIGKILL)

        async def served() -> bool:
            try:
                r = await post(launcher.url, call("system_health"), client_ip=next_client_ip())
            except aiohttp.ClientError:
                return False
            return r.status == 200

        await wait_until(served, 60, "the proxy started again")
        assert launcher.proxies() - {proxy} and launcher.proc.poll() is None
        assert "proxy started again" in launcher.output()


async def test_a_worker_or_the_local_redis_that_dies_is_started_again(tmp_path: Path) -> None:
    """``--workers 2``: a worker killed, then the launcher's own redis-server.
    Every call is answered meanwhile (HAProxy sends the dead worker's calls to
    the other; without Redis each worker counts its own quota), and each is
    started again. (The launcher used to stop the whole stack at either.)"""
    if find_tool("haproxy") is None or find_tool("redis-server") is None:
        pytest.skip("haproxy and redis-server are installed by `make test` (Debian packages)")
    with _launch(tmp_path, 2, {"rate_limit": {"requests": 100_000, "window_s": 60}}) as launcher:

        def redis() -> set[int]:
            return {p for p in _descendants(launcher.proc.pid) if b"redis-server" in _cmdline(p)}

        async def all_answered() -> None:
            for i in range(20):
                reply = await post(launcher.url, call("system_health", id_=i))
                assert reply.status == 200, reply.body

        before = launcher.proxies()
        assert len(before) == 2
        os.kill(min(before), signal.SIGKILL)
        await all_answered()
        await wait_until(
            lambda: "worker started again" in launcher.output(), 90, "a worker started again"
        )
        now = launcher.proxies()
        assert len(now) == 2 and len(now - before) == 1, (before, now)
        await all_answered()

        (first,) = redis()
        os.kill(first, signal.SIGKILL)
        await all_answered()
        await wait_until(lambda: redis() - {first}, 30, "a new redis-server")
        await all_answered()
        assert launcher.proc.poll() is None
        out = launcher.output()
        assert "redis-server started again" in out and "; stopping" not in out


async def test_a_simulated_node_that_dies_is_a_nodes_death_not_the_stacks(tmp_path: Path) -> None:
    """``make demo``: killing a simulated node to watch the failover used to
    stop the whole demo; now the proxy fails over as from a real node."""
    with _launch(tmp_path, 1, {"rate_limit": {"requests": 100_000, "window_s": 60}}) as launcher:
        nodes = {p for p in _descendants(launcher.proc.pid) if b"simnode" in _cmdline(p)}
        assert len(nodes) >= 2, nodes
        os.kill(min(nodes), signal.SIGKILL)
        await wait_until(
            lambda: "the proxy fails over to the other nodes" in launcher.output(),
            20,
            "the launcher saying the node died",
        )
        for i in range(20):
            reply = await post(launcher.url, call("chain_getHeader", id_=i))
            assert reply.status == 200 and "result" in reply.body, reply.body
        assert launcher.proc.poll() is None and "; stopping" not in launcher.output()
