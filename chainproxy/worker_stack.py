"""Starting ``--workers N`` (see ``chainproxy/workers.py`` for the why): a
local redis-server when the config has no ``redis:``, N mitmdumps on loopback
ports, HAProxy on the public address with one spare server slot and its
runtime API (the rolling restart's, ``chainproxy/rolling.py``). All children
of the launcher's ``Supervisor``: Ctrl-C stops every one, and none outlives it;
a worker or the local redis-server that dies is started again (``keep_workers``)."""

from __future__ import annotations

import argparse
import resource
import tempfile
from collections.abc import Callable
from pathlib import Path

from chainproxy.balancer import Balancer
from chainproxy.commands import proxy_argv
from chainproxy.keepers import Keeper, StartFailed
from chainproxy.rolling import RollError, Slot, WorkerPool
from chainproxy.supervisor import Child, Supervisor, free_port, wait_http, wait_port, wait_until
from chainproxy.workers import (
    BALANCER_SOURCE,
    find_tool,
    haproxy_argv,
    haproxy_config,
    redis_argv,
)
from common.config import Config

SOCKET_PATH_MAX = 100  # a Unix socket's path is at most 107 bytes


def admin_socket_path(run_dir: Path) -> Path:
    """``run_dir/haproxy.sock``, or one in a private temporary directory when
    that path is too long for a Unix socket."""
    path = run_dir / "haproxy.sock"
    if len(str(path).encode()) <= SOCKET_PATH_MAX:
        return path
    return Path(tempfile.mkdtemp(prefix="chainproxy-")) / "haproxy.sock"


def worker_tools(config: Config) -> dict[str, str] | str:
    """The programs ``--workers`` needs, or the one line that says what is missing."""
    tools = {}
    haproxy = find_tool("haproxy")
    if haproxy is None:
        return "--workers needs HAProxy to share one address: apt-get install haproxy"
    tools["haproxy"] = haproxy
    if config.redis is None:
        redis = find_tool("redis-server")
        if redis is None:
            return (
                "--workers needs one shared quota: add a redis: section to the config "
                "or install redis-server (apt-get install redis-server)"
            )
        tools["redis-server"] = redis
    return tools


def start_workers(
    stack: Supervisor,
    args: argparse.Namespace,
    config: Config,
    mitm: str,
    tools: dict[str, str],
) -> WorkerPool:
    """Start everything behind ``--listen-host:--listen-port``; the workers as
    HAProxy slots (``pool.balancer_child`` is HAProxy's process)."""
    run_dir = (config.data_dir / "run").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    sets = [
        *args.sets,
        f"chainproxy_trusted_proxies={BALANCER_SOURCE}/32",
        # while Redis is away each worker keeps 1/N of a node's budget, not the whole
        f"chainproxy_processes={args.workers}",
    ]
    redis: Child | None = None
    if config.redis is None:
        port = free_port()
        argv = redis_argv(tools["redis-server"], port, run_dir)
        redis = stack.start("redis-server", argv)
        wait_port(port, redis)
        sets.append(f"chainproxy_redis_url=redis://127.0.0.1:{port}/0")
        print(f"chainproxy: shared quota in a local redis-server on 127.0.0.1:{port}", flush=True)

    def worker_argv(port: int) -> list[str]:
        # the config file is read by each worker as it starts: a replacement
        # started by a reload reads the new one
        return proxy_argv(mitm, args.config, config.sidecar.url, port=port, sets=sets)

    ports = [free_port() for _ in range(args.workers)]
    admin = admin_socket_path(run_dir)
    cfg = Path(run_dir / "haproxy.cfg")
    cfg.write_text(
        haproxy_config(
            args.listen_host,
            args.listen_port,
            ports,
            server_timeout_s=config.proxy.failover.deadline_s,
            max_fds=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
            spares=1,
            admin_socket=admin,
        )
    )
    pool = WorkerPool(stack, Balancer(admin), worker_argv)
    if redis is not None:  # on the same port: the workers find it again there
        pool.redis = (redis, lambda: stack.start("redis-server", argv))
    children = [pool.start_worker(p) for p in ports]
    for i, (child, port) in enumerate(zip(children, ports, strict=True), 1):
        wait_http(f"http://127.0.0.1:{port}/healthz", child, also=stack.children)
        pool.slots.append(Slot(f"w{i}", port, child))
    pool.slots.append(Slot(f"w{args.workers + 1}"))
    admin.unlink(missing_ok=True)  # a previous run's: we wait for this run's to appear
    balancer = stack.start("haproxy", haproxy_argv(tools["haproxy"], cfg))
    wait_until(admin.exists, balancer, f"no runtime API socket at {admin}", 30.0)
    pool.balancer_child = balancer
    print(
        f"chainproxy: {args.workers} proxy processes (127.0.0.1:{', '.join(map(str, ports))}) "
        f"behind HAProxy on {args.listen_host}:{args.listen_port}",
        flush=True,
    )
    return pool


def keep_workers(keeper: Keeper, pool: WorkerPool, check: Callable[[], str | None]) -> None:
    """Workers that die, and the launcher's own redis-server, started again
    (``chainproxy/keepers.py``). A worker reads the config file as it starts:
    never from one a reload would refuse (``check``)."""

    def new_worker() -> Child:
        try:
            return pool.add_worker()
        except RollError as e:
            raise StartFailed(str(e)) from None

    def lost(child: Child) -> bool:
        if not pool.owns(child):
            return False
        pool.lost(child)
        return True

    keeper.keep("worker", lost, new_worker, "HTTP calls go to the other workers, if any", check)
    if pool.redis is not None:
        first, start = pool.redis
        keeper.keep_one(
            "redis-server", first, start, "each worker counts its own quota until it is back"
        )
