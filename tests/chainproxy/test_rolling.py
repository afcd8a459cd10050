"""The rolling restart's parts (``chainproxy/balancer.py``, ``rolling.py``)
on a real HAProxy, with small HTTP servers as workers: ``show stat`` read
right, a spare slot taken into the rotation and a worker taken out, every
worker replaced while a client calls without pause and never fails, and a
replacement that does not come up stopping the restart with the old workers
still serving."""

from __future__ import annotations

import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from chainproxy.balancer import Balancer, BalancerError, parse_stat
from chainproxy.rolling import RollError, Slot, WorkerPool
from chainproxy.supervisor import Supervisor, free_port, wait_http, wait_until
from chainproxy.workers import find_tool, haproxy_argv, haproxy_config

HAPROXY = find_tool("haproxy")
needs_haproxy = pytest.mark.skipif(
    HAPROXY is None, reason="haproxy is not installed (make test installs it: make scale-deps)"
)

STAT = """# pxname,svname,qcur,qmax,scur,smax,slim,stot,status,weight
chainproxy,FRONTEND,,,3,5,256,9,OPEN,
workers,w1,0,0,2,4,,7,UP,1
workers,w2,0,0,0,1,,2,DRAIN,1
workers,w3,0,0,0,0,,0,MAINT,1
workers,BACKEND,0,0,2,5,26,9,UP,2
"""


def test_show_stat_is_read_per_server_of_the_backend() -> None:
    servers = parse_stat(STAT)
    assert set(servers) == {"w1", "w2", "w3"}
    assert servers["w1"]["scur"] == "2" and servers["w2"]["status"] == "DRAIN"
    assert parse_stat("") == {} and parse_stat("No such backend.\n") == {}


def test_an_unreachable_runtime_api_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(BalancerError, match="runtime API"):
        Balancer(tmp_path / "nothing.sock").command("show stat")


def _worker_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[tuple[WorkerPool, str]]:
    assert HAPROXY is not None
    stack = Supervisor(logdir=tmp_path, cwd=tmp_path, grace_s=5)
    try:
        pool = WorkerPool(stack, Balancer(tmp_path / "h.sock"), _worker_argv)
        ports = [free_port(), free_port()]
        for i, port in enumerate(ports, 1):
            child = pool.start_worker(port)
            wait_http(f"http://127.0.0.1:{port}/", child)
            pool.slots.append(Slot(f"w{i}", port, child))
        pool.slots.append(Slot("w3"))
        front = free_port()
        cfg = tmp_path / "haproxy.cfg"
        text = haproxy_config(
            "127.0.0.1",
            front,
            ports,
            server_timeout_s=5,
            max_fds=4096,
            spares=1,
            admin_socket=pool.balancer.socket_path,
        )
        cfg.write_text(text)
        pool.balancer_child = stack.start("haproxy", haproxy_argv(HAPROXY, cfg))
        wait_until(pool.balancer.socket_path.exists, pool.balancer_child, "no socket", 20)
        yield pool, f"http://127.0.0.1:{front}/"
    finally:
        stack.stop_all()


def _statuses(pool: WorkerPool) -> dict[str, str]:
    return {name: row["status"] for name, row in pool.balancer.servers().items()}


@needs_haproxy
def test_every_worker_replaced_while_a_client_calls(pool: tuple[WorkerPool, str]) -> None:
    workers, url = pool
    assert _statuses(workers)["w3"] == "MAINT"
    before = set(workers.pids())
    failures: list[str] = []
    answered = 0
    stop = threading.Event()

    def client() -> None:
        nonlocal answered
        while not stop.is_set():
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    assert r.status == 200
                    answered += 1
            except (OSError, urllib.error.URLError) as e:
                failures.append(repr(e))

    thread = threading.Thread(target=client)
    thread.start()
    try:
        workers.replace_all(drain_s=1)
    finally:
        stop.set()
        thread.join(10)
    assert failures == [] and answered > 10
    after = set(workers.pids())
    assert len(after) == 2 and not after & before
    assert all(c.alive() for c in workers.stack.children)
    statuses = _statuses(workers)
    live = {s.name for s in workers.live()}
    assert {statuses[n] for n in live} == {"UP"}
    (spare,) = {"w1", "w2", "w3"} - live
    assert statuses[spare] == "MAINT"
    workers.replace_all(drain_s=1)  # and again: the spare moves on
    assert len(set(workers.pids())) == 2


@needs_haproxy
def test_a_replacement_that_fails_stops_the_restart(pool: tuple[WorkerPool, str]) -> None:
    workers, url = pool
    before = workers.pids()
    workers.worker_argv = lambda port: [sys.executable, "-c", "raise SystemExit(3)"]
    with pytest.raises(RollError, match="did not come up"):
        workers.replace_all(drain_s=1)
    assert workers.pids() == before  # the old workers stay, in the rotation
    assert {s.name: s.child is not None for s in workers.slots} == {
        "w1": True,
        "w2": True,
        "w3": False,
    }
    assert _statuses(workers)["w3"] == "MAINT"
    assert all(c.alive() for c in workers.stack.children)  # the failed one is not kept
    with urllib.request.urlopen(url, timeout=5) as r:
        assert r.status == 200
