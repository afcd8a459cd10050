"""Starting ``--workers N`` (see ``chainproxy/workers.py`` for the why): a
local redis-server when the config has no ``redis:``, N mitmdumps on loopback
ports, HAProxy on the public address. All children of the launcher's
``Supervisor``: Ctrl-C stops every one, and none outlives it."""

from __future__ import annotations

import argparse
import resource
from pathlib import Path

from chainproxy.commands import proxy_argv
from chainproxy.supervisor import Child, Supervisor, free_port, wait_http, wait_port
from chainproxy.workers import (
    BALANCER_SOURCE,
    find_tool,
    haproxy_argv,
    haproxy_config,
    redis_argv,
)
from common.config import Config


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
) -> Child:
    """Start everything behind ``--listen-host:--listen-port``; the balancer's child."""
    run_dir = (config.data_dir / "run").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    sets = [*args.sets, f"chainproxy_trusted_proxies={BALANCER_SOURCE}/32"]
    if config.redis is None:
        port = free_port()
        redis = stack.start("redis-server", redis_argv(tools["redis-server"], port, run_dir))
        wait_port(port, redis)
        sets.append(f"chainproxy_redis_url=redis://127.0.0.1:{port}/0")
        print(f"chainproxy: shared quota in a local redis-server on 127.0.0.1:{port}", flush=True)
    ports = [free_port() for _ in range(args.workers)]
    workers = [
        stack.start(
            f"mitmdump-{i}", proxy_argv(mitm, args.config, config.sidecar.url, port=p, sets=sets)
        )
        for i, p in enumerate(ports, 1)
    ]
    for child, port in zip(workers, ports, strict=True):
        wait_http(f"http://127.0.0.1:{port}/healthz", child, also=stack.children)
    cfg = Path(run_dir / "haproxy.cfg")
    cfg.write_text(
        haproxy_config(
            args.listen_host,
            args.listen_port,
            ports,
            server_timeout_s=config.proxy.failover.deadline_s,
            max_fds=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        )
    )
    balancer = stack.start("haproxy", haproxy_argv(tools["haproxy"], cfg))
    print(
        f"chainproxy: {args.workers} proxy processes (127.0.0.1:{', '.join(map(str, ports))}) "
        f"behind HAProxy on {args.listen_host}:{args.listen_port}",
        flush=True,
    )
    return balancer
