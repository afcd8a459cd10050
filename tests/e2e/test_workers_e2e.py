"""``python -m chainproxy.launch --workers 2`` as an operator runs it: one
address, two proxy processes behind HAProxy, a local redis-server for the one
quota, usage counted once, subscriptions through the balancer, and Ctrl-C
leaving no process behind.

The quota is exact only while every check reaches Redis: a check that falls
back to a worker's local limiter is not in the shared count. A loaded machine
used to cause that (a worker's Redis connect, or a check queued behind a busy
loop turn, timed out on the loop's time, not Redis's: ``addon/redislink``), so
a failure here says how many checks fell back."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from chainproxy.workers import find_tool
from tests.e2e.harness import REPO, free_port
from tests.e2e.helpers import (
    call,
    demo_config,
    metric_value,
    metrics_text,
    next_client_ip,
    post,
    read_until_banner,
    two_heads,
    wait_until,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_tool("haproxy") is None or find_tool("redis-server") is None,
        reason="haproxy and redis-server are installed by `make test` (Debian packages)",
    ),
]


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children lead process groups of their own)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - out
        out |= frontier
    return out


def _names(pids: set[int]) -> list[str]:
    names = []
    for p in pids:
        try:
            names.append(Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].decode())
        except OSError:
            continue
    return names


def _usage(sidecar: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{sidecar}/api/v1/usage?network=finney", timeout=5) as r:
        return json.loads(r.read())


def _fallbacks(sidecar: str) -> float:
    """Quota checks the workers answered locally (Redis down or too slow)."""
    return metric_value(
        metrics_text(sidecar), "chainproxy_redis_fallbacks_total", store="ratelimit"
    )


async def _traffic(url: str, sidecar: str, ips: list[str]) -> None:
    # 200 concurrent calls from 4 clients (50 each, within each quota): 0 errors
    replies = await asyncio.gather(
        *(post(url, call("system_health", id_=i), client_ip=ips[i % 4]) for i in range(200))
    )
    assert [r.status for r in replies] == [200] * 200

    # one client, one quota across both workers (the balancer's X-Forwarded-For is
    # believed, the count is in Redis): 50 already taken, 50 more pass, then 429
    seq = [await post(url, call("system_health", id_=i), client_ip=ips[0]) for i in range(60)]
    statuses = [r.status for r in seq]
    assert statuses.count(200) == 50 and statuses.count(429) == 10, (
        f"{statuses.count(200)} passed, {statuses.count(429)} refused; quota checks "
        f"answered locally so far (shipped every 2 s): {_fallbacks(sidecar):g}"
    )
    # a spoofed X-Forwarded-For does not buy a new quota
    spoofed = await post(
        url, call("system_health"), client_ip=ips[0], headers={"X-Forwarded-For": "1.2.3.4"}
    )
    assert spoofed.status == 429

    # subscriptions through the balancer
    heads = await two_heads(url.replace("http://", "ws://"))
    assert int(heads[1]["number"], 16) == int(heads[0]["number"], 16) + 1


async def _usage_of_both_workers(sidecar: str, workers: list[int]) -> int:
    """The sidecar's request count once every call the workers served has
    reached it. A worker ships its usage records in batches, oldest first, the
    live counters in the same batch as the records: a call each worker refuses
    (the allowlist's: counted in the live metrics, never as usage), sent to each
    worker directly after the traffic, is in a batch after every record of the
    traffic. Once both refusals are in the sidecar's /metrics, a late or
    duplicate record would be in the count too (the sidecar stores a batch's
    records before it adds its counters): nothing more is on its way."""
    refusals = "chainproxy_refusals_total"
    before = metric_value(metrics_text(sidecar), refusals, policy="allowlist")
    for port in workers:
        r = await post(f"http://127.0.0.1:{port}/rpc/v1/finney", call("author_submitExtrinsic"))
        assert r.status == 403 and r.body["error"]["data"]["policy"] == "allowlist", r.body
    await wait_until(
        lambda: (
            metric_value(metrics_text(sidecar), refusals, policy="allowlist")
            >= before + len(workers)
        ),
        30,
        "both workers' usage batches after the traffic reached the sidecar",
        step=0.2,
    )
    return int(_usage(sidecar)["requests"])


def _worker_ports(banner: str) -> list[int]:
    """The workers' loopback ports, from "N proxy processes (127.0.0.1:p1, p2) behind"."""
    m = re.search(r"proxy processes \(127\.0\.0\.1:([\d, ]+)\)", banner)
    assert m is not None, banner[-3000:]
    return [int(p) for p in m.group(1).split(",")]


def _notable(output: str) -> str:
    """The launcher's output without its lines per connection and per call."""
    noise = ("client connect", "client disconnect", ": POST ", ": GET ", "<< ")
    return "\n".join(line for line in output.splitlines() if not any(n in line for n in noise))


def _launch_two_workers(config: Path, port: int) -> subprocess.Popen[str]:
    """The launcher as an operator runs it: ``--workers 2`` on ``port``, the
    config's nodes simulated, its output in one pipe."""
    argv = [sys.executable, "-m", "chainproxy.launch", "--config", str(config), "--simulate"]
    return subprocess.Popen(
        [*argv, "--workers", "2", "--listen-port", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_two_workers_serve_one_address_with_one_quota(tmp_path: Path) -> None:
    config = demo_config(tmp_path)
    sidecar = f"http://127.0.0.1:{yaml.safe_load(config.read_text())['sidecar']['port']}"
    port = free_port()
    proc = _launch_two_workers(config, port)
    try:
        text = "".join(read_until_banner(proc, 90))
        assert "2 proxy processes" in text and "redis-server" in text, text[-3000:]
        workers = _worker_ports(text)
        assert len(workers) == 2, text[-3000:]
        kids = _descendants(proc.pid)
        names = _names(kids)
        assert sum(n.endswith("python") or "mitmdump" in n for n in names) >= 2
        assert any(n.endswith("haproxy") for n in names), names
        assert any("redis-server" in n for n in names), names

        ips = [next_client_ip() for _ in range(4)]
        try:
            asyncio.run(_traffic(f"http://127.0.0.1:{port}/rpc/v1/finney", sidecar, ips))
        except AssertionError:
            os.kill(proc.pid, signal.SIGINT)
            proc.wait(30)
            assert proc.stdout is not None
            print(_notable(proc.stdout.read())[-5000:])
            raise

        # usage from both workers reaches the sidecar exactly once per call
        served = 200 + 50 + 1  # the burst, one client's quota, the subscribe call
        assert asyncio.run(_usage_of_both_workers(sidecar, workers)) == served

        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(30) == 0
        deadline = time.monotonic() + 10
        while (left := {p for p in kids if Path(f"/proc/{p}").exists()}) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert not left, f"orphans: {_names(left)}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _slow_nodes(config: Path, latency_ms: float) -> None:
    """Every simulated node of the config answers ``latency_ms`` late."""
    for e in yaml.safe_load(config.read_text())["registry"]["endpoints"]:
        if e["kind"] != "node-rpc":
            continue
        body = json.dumps({"latency_ms": latency_ms}).encode()
        req = urllib.request.Request(
            e["url"] + "/_sim/control", body, {"Content-Type": "application/json"}
        )
        urllib.request.urlopen(req, timeout=5).read()


async def _in_flight_at_stop(url: str, config: Path, proc: subprocess.Popen[str]) -> None:
    """Two POSTs and two WebSocket calls (each socket with a subscription)
    in flight when the launcher gets SIGTERM: each is answered, and each
    socket is then closed 1001 ("going away"), through HAProxy."""
    import aiohttp

    ws_url = url.replace("http://", "ws://")
    async with aiohttp.ClientSession() as s:
        sockets = [await s.ws_connect(ws_url) for _ in range(2)]
        for n, ws in enumerate(sockets):
            await ws.send_str(json.dumps(call("chain_subscribeNewHeads", id_=f"sub{n}")))
            while "sub" not in str(json.loads((await ws.receive(timeout=15)).data).get("id")):
                pass  # a head may come before the subscription's id: read on
        await asyncio.to_thread(_slow_nodes, config, 1500)
        posts = [
            asyncio.create_task(post(url, call("state_getStorage", [f"0x{n:064x}"], id_=n)))
            for n in range(2)
        ]
        for n, ws in enumerate(sockets):
            await ws.send_str(json.dumps(call("state_getStorage", [f"0x{n + 9:064x}"], id_=n)))
        await asyncio.sleep(0.4)  # the calls reached the workers, the nodes hold them
        os.kill(proc.pid, signal.SIGTERM)
        replies = await asyncio.gather(*posts)
        assert [r.status for r in replies] == [200, 200], [r.body for r in replies]
        assert all("result" in r.body for r in replies), [r.body for r in replies]
        for n, ws in enumerate(sockets):
            answered = False
            while (msg := await ws.receive(timeout=20)).type == aiohttp.WSMsgType.TEXT:
                doc = json.loads(msg.data)
                answered = answered or (doc.get("id") == n and "result" in doc)
            assert answered, f"socket {n}: no answer before {msg.type}"
            # the code in the close frame the worker sent (``ws.close_code`` turns
            # 1006 when the client's own close frame in reply finds the socket gone)
            assert (msg.type, msg.data) == (aiohttp.WSMsgType.CLOSE, 1001), (n, msg)


def test_stopping_the_workers_answers_what_is_in_flight_and_says_going_away(
    tmp_path: Path,
) -> None:
    """SIGTERM to a ``--workers`` stack: HAProxy went first and cut every
    client (no answer, WebSocket close 1006). Now HAProxy stops listening and
    the workers drain through it, as one proxy process does."""
    config = demo_config(tmp_path)
    port = free_port()
    proc = _launch_two_workers(config, port)
    try:
        text = "".join(read_until_banner(proc, 90))
        assert "2 proxy processes" in text, text[-3000:]
        try:
            asyncio.run(_in_flight_at_stop(f"http://127.0.0.1:{port}/rpc/v1/finney", config, proc))
        except (AssertionError, TimeoutError):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
            proc.wait(30)
            assert proc.stdout is not None
            print(_notable(proc.stdout.read())[-5000:])
            raise
        assert proc.wait(30) == 0
        assert proc.stdout is not None
        out = proc.stdout.read()
        # each worker says what it drained, and no traceback alarms the operator
        assert out.count("SIGTERM: draining") == 2, _notable(out)[-3000:]
        assert "Traceback" not in out and "Exception in callback" not in out, out[-5000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
