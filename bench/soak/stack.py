"""The soak's processes, all on 127.0.0.1, and what chaos does to them:
simulated nodes (HTTP and WebSocket on one port, so each is a node-rpc and a
node-wss endpoint), the sidecar, a redis-server, two proxies behind HAProxy
(what ``chainproxy run --workers 2`` starts: the proxies are its
``WorkerPool``, HAProxy has its spare slot and runtime API). Every restart
keeps the port and the data directory, as an operator's restart does; a
reload is the launcher's own (``chainproxy.reload.Reloader``): the sidecar
gets SIGHUP and the proxies are replaced one at a time."""

from __future__ import annotations

import os
import resource
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.stack import BIN, Node, Stack, sidecar_section
from chainproxy.balancer import Balancer
from chainproxy.commands import proxy_argv
from chainproxy.reload import Reloader
from chainproxy.rolling import Slot, WorkerPool
from chainproxy.supervisor import Child, free_port, wait_http, wait_port, wait_until
from chainproxy.worker_stack import admin_socket_path
from chainproxy.workers import BALANCER_SOURCE, find_tool, haproxy_argv, haproxy_config, redis_argv
from common.config import FINNEY_GENESIS, load_config

BLOCK_S = 3.0
QUOTA = 1200  # calls per client per 60 s: the normal clients stay under it, one does not
RELOAD_QUOTA = 1500  # what a "reload" action changes it to (and the next one back)


def soak_config(
    nodes: list[Node], *, data_dir: Path, sidecar_port: int, redis_url: str | None
) -> dict[str, Any]:
    endpoints = []
    for n in nodes:
        common = {"provider": f"sim-{n.name}", "network": "finney", "archive": True}
        endpoints.append({"url": n.url, "kind": "node-rpc", **common})
        endpoints.append({"url": n.url.replace("http://", "ws://"), "kind": "node-wss", **common})
    config: dict[str, Any] = {
        "proxy": {
            "networks": ["finney"],
            "rate_limit": {"requests": QUOTA, "window_s": 60},
            "usage": {"flush_s": 1},
            # two block times, as the default's 24 s are for Bittensor's 12 s blocks
            "websocket": {"stall_s": 2 * BLOCK_S, "upstream_linger_s": 5},
        },
        "sidecar": sidecar_section(sidecar_port),
        "data_dir": str(data_dir),
        "networks": {"finney": {"genesis": FINNEY_GENESIS}},
        "probe": {"interval_s": 3, "head_interval_s": 1, "timeout_s": 2},
        "registry": {"endpoints": endpoints},
    }
    if redis_url is not None:
        config["redis"] = {"url": redis_url}
    return config


@dataclass
class SoakStack:
    tmp: Path
    node_count: int = 3
    with_redis: bool = True
    base: Stack = field(init=False)
    nodes: dict[str, Node] = field(default_factory=dict)
    sidecar: Child | None = None
    redis: Child | None = None
    pool: WorkerPool | None = None  # the two proxies, as HAProxy's server slots
    reloader: Reloader | None = None
    quota: int = QUOTA  # proxy.rate_limit.requests in the config now
    url: str = ""  # HAProxy: where the clients go
    sidecar_url: str = ""
    restarts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.base = Stack(self.tmp)
        self._redis_port = free_port()

    def start(self) -> None:
        epoch = time.time() - 600
        names = ["alpha", "beta", "gamma", "delta", "epsilon"][: self.node_count]
        for name in names:
            self.nodes[name] = self.base.start_node(name, epoch=epoch, block_time=BLOCK_S)
        redis_url = None
        if self.with_redis:
            self.start_redis()
            redis_url = f"redis://127.0.0.1:{self._redis_port}/0"
        sidecar_port = free_port()
        self.sidecar_url = f"http://127.0.0.1:{sidecar_port}"
        config = soak_config(
            list(self.nodes.values()),
            data_dir=self.tmp / "data",
            sidecar_port=sidecar_port,
            redis_url=redis_url,
        )
        self.config_path = self.tmp / "soak.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.start_sidecar()
        self.pool = WorkerPool(
            self.base.sup, Balancer(admin_socket_path(self.tmp)), self._proxy_argv
        )
        ports = [free_port(), free_port()]
        children = [self.pool.start_worker(p) for p in ports]
        for i, (child, port) in enumerate(zip(children, ports, strict=True), 1):
            wait_http(f"http://127.0.0.1:{port}/healthz", child)
            self.pool.slots.append(Slot(f"w{i}", port, child))
        self.pool.slots.append(Slot("w3"))  # the spare
        self._start_haproxy(ports)
        assert self.sidecar is not None
        self.reloader = Reloader(
            str(self.config_path), load_config(self.config_path), self.sidecar, None, self.pool
        )

    def _start_haproxy(self, ports: list[int]) -> None:
        """HAProxy with the config ``--workers`` writes (a spare slot, the runtime API)."""
        assert self.pool is not None
        tool = find_tool("haproxy")
        assert tool is not None, "haproxy is not installed (make scale-deps)"
        front = free_port()
        admin = self.pool.balancer.socket_path
        cfg = self.tmp / "haproxy.cfg"
        cfg.write_text(
            haproxy_config(
                "127.0.0.1",
                front,
                ports,
                server_timeout_s=15,
                max_fds=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                spares=1,
                admin_socket=admin,
            )
        )
        admin.unlink(missing_ok=True)
        balancer = self.base.spawn("haproxy", haproxy_argv(tool, cfg))
        wait_port(front, balancer)
        wait_until(admin.exists, balancer, f"no runtime API socket at {admin}", 20)
        self.pool.balancer_child = balancer
        self.url = f"http://127.0.0.1:{front}"

    def stop(self) -> None:
        self.base.stop()

    # --- the parts ---------------------------------------------------------------------

    def start_redis(self) -> None:
        tool = find_tool("redis-server")
        assert tool is not None, "redis-server is not installed (make scale-deps)"
        directory = self.tmp / "redis"
        directory.mkdir(exist_ok=True)
        self.redis = self.base.spawn("redis", redis_argv(tool, self._redis_port, directory))
        wait_port(self._redis_port, self.redis)

    def start_sidecar(self) -> None:
        self.sidecar = self.base.start_sidecar(
            "sidecar", self.config_path, self.sidecar_url, timeout_s=60
        )

    def _proxy_argv(self, port: int) -> list[str]:
        sets = (f"chainproxy_trusted_proxies={BALANCER_SOURCE}/32",)
        return proxy_argv(
            BIN / "mitmdump", self.config_path, self.sidecar_url, port=port, sets=sets, quiet=True
        )

    @property
    def proxies(self) -> list[Child]:
        """The two proxies in their slots' order (a stopped one included)."""
        assert self.pool is not None
        return [s.child for s in self.pool.live() if s.child is not None]

    # --- chaos -------------------------------------------------------------------------

    def node_fault(self, name: str, faults: dict[str, Any]) -> None:
        self.nodes[name].control(**faults)

    def node_rate_limited(self, name: str) -> int:
        """The 429s the node's ``limit_rps`` fault answered since its last reset."""
        return int(self.nodes[name].state().get("rate_limited", 0))

    def node_heal(self, name: str) -> None:
        self.nodes[name].reset()

    def kill_node(self, name: str) -> None:
        self.nodes[name].proc.stop(signal.SIGKILL)

    def restart_node(self, name: str) -> None:
        self.nodes[name] = self.base.restart_node(self.nodes[name])
        self._count(f"node-{name}")

    def kill_sidecar(self) -> None:
        assert self.sidecar is not None
        self.sidecar.stop(signal.SIGKILL)
        self.base.sup.forget(self.sidecar)

    def kill_redis(self) -> None:
        assert self.redis is not None
        self.redis.stop(signal.SIGKILL)
        self.base.sup.forget(self.redis)

    def restart_sidecar(self) -> None:
        self.start_sidecar()
        self._count("sidecar")

    def restart_redis(self) -> None:
        self.start_redis()
        self._count("redis")

    def stop_proxy(self, i: int) -> int | None:
        """SIGTERM (the proxy drains), SIGKILL after 15 s; its exit code. It
        keeps its slot in HAProxy (whose checks find it down meanwhile)."""
        child = self.proxies[i]
        self.base.sup.forget(child)
        return child.stop(signal.SIGTERM, grace_s=15.0)

    def start_proxy(self, i: int) -> None:
        """A new process in the stopped one's slot, on its port."""
        assert self.pool is not None
        slot = self.pool.live()[i]
        assert slot.port is not None
        slot.child = self.pool.start_worker(slot.port)
        wait_http(f"http://127.0.0.1:{slot.port}/healthz", slot.child)
        self._count(f"proxy-{i + 1}")

    def reload(self, quota: int | None = None) -> str:
        """``chainproxy reload``: with ``quota``, the config's rate limit changed
        first. Both proxies are replaced one at a time; the outcome's state."""
        assert self.reloader is not None and self.sidecar is not None
        if quota is not None:
            doc = yaml.safe_load(self.config_path.read_text())
            doc["proxy"]["rate_limit"]["requests"] = quota
            self.config_path.write_text(yaml.safe_dump(doc))
            self.quota = quota
        self.reloader.sidecar = self.sidecar  # the one running now (it may have restarted)
        state = self.reloader.run()
        self._count("reload" if quota is not None else "rolling")
        return state

    def _count(self, part: str) -> None:
        self.restarts[part] = self.restarts.get(part, 0) + 1

    # --- resources ---------------------------------------------------------------------

    def resources(self) -> dict[str, tuple[int, int]]:
        """(RSS in KiB, open descriptors) of each long-lived process now."""
        parts = {f"proxy-{i}": child for i, child in enumerate(self.proxies, 1)}
        if self.sidecar is not None:
            parts["sidecar"] = self.sidecar
        out = {}
        for name, child in parts.items():
            if child.alive():
                out[name] = (rss_kib(child.pid), open_fds(child.pid))
        return out


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0
