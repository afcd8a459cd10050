"""Processes on 127.0.0.1 with free ports, for the benchmarks and the end-to-end
tests: ``ProcessStack`` starts what both need (simulated nodes, the sidecar,
chainproxy = mitmdump with the addon) and ``Stack`` adds what only the
benchmarks run (the trivial upstream, bare mitmdump, nginx). Every child runs
in its own session, gets SIGTERM from the kernel if the runner dies, and is
stopped with its process group by ``stop`` (``chainproxy.supervisor``).

Why here: the e2e harness (``tests/e2e/harness.py``) builds on
``ProcessStack``, and the tests already import ``bench`` (the soak smoke
test), while the benchmarks must not need pytest, which nothing here imports.
``chainproxy/`` is product code, and a top-level folder of its own would be a
third place for test machinery."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from chainproxy.commands import proxy_argv, reverse_proxy_argv, sidecar_argv
from chainproxy.supervisor import (
    Child,
    Spawner,
    StartError,
    Supervisor,
    free_port,
    wait_http,
    wait_port,
)
from common.config import FINNEY_GENESIS
from simnode.command import simnode_argv
from simnode.remote import RemoteNode
from simnode.remote import http_json as http_json

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
NGINX_STREAM_MODULE = Path("/usr/lib/nginx/modules/ngx_stream_module.so")


def nginx_path() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None
    )


def post_raw(url: str, body: bytes, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def sidecar_section(port: int | None = None) -> dict[str, Any]:
    """The config's ``sidecar`` block: loopback, on ``port`` or a free one."""
    port = port or free_port()
    return {"host": "127.0.0.1", "port": port, "url": f"http://127.0.0.1:{port}"}


@dataclass
class Node(RemoteNode):
    """A simulated node (``python -m simnode``)."""

    proc: Child
    argv: list[str] = field(default_factory=list)  # its command line, for a restart


@dataclass
class ProcessStack:
    """The processes the benchmarks and the e2e tests both start."""

    tmp: Path  # the processes' logs and configs
    nodes: list[Node] = field(default_factory=list)  # every node started, restarts replaced
    sup: Supervisor = field(init=False)

    # the simulated chain's defaults: a block every NODE_BLOCK_S from NODE_START_HEIGHT
    NODE_BLOCK_S: ClassVar[float] = 12.0
    NODE_START_HEIGHT: ClassVar[int] = 4_000_000

    # how its children start (``chainproxy.supervisor.spawn`` when None): the test
    # suite's pre-imported interpreter (``tests/zygote.py``) in ``make test``
    spawner: ClassVar[Spawner | None] = None

    def __post_init__(self) -> None:
        self.sup = Supervisor(logdir=self.tmp, cwd=REPO, spawner=ProcessStack.spawner)

    @property
    def procs(self) -> list[Child]:
        """Every process started for this stack: ``stop`` ends them."""
        return self.sup.children

    def spawn(
        self,
        name: str,
        argv: list[str],
        cpus: set[int] | None = None,
        env: dict[str, str] | None = None,
    ) -> Child:
        """Start ``argv`` (output in ``<tmp>/<name>.log``); ``cpus``: pin it (and
        every thread it starts) to these cores; ``env``: variables to add to the
        environment."""
        return self.sup.start(name, argv, cpus=cpus, env=env)

    def stop(self) -> None:
        self.sup.stop_all()

    # --- simulated nodes -------------------------------------------------------------

    def start_node(
        self,
        name: str,
        *,
        epoch: float,
        port: int | None = None,
        wait: bool = True,
        block_time: float | None = None,
        start_height: int | None = None,
        seed: str = "finney",
        genesis: str = FINNEY_GENESIS,
        archive: bool = False,
        host: str = "127.0.0.1",
        state_keep: int | None = None,
    ) -> Node:
        """A node on ``host``:``port`` (a free port by default); ``wait=False``:
        return at once, before it answers; ``state_keep``: blocks of state it
        keeps (``--state-keep``)."""
        port = port or free_port()
        argv = simnode_argv(
            port,
            name=name,
            seed=seed,
            epoch=epoch,
            block_time=self.NODE_BLOCK_S if block_time is None else block_time,
            start_height=self.NODE_START_HEIGHT if start_height is None else start_height,
            genesis=genesis,
            archive=archive,
            host=host,
            state_keep=state_keep,
        )
        proc = self.spawn(f"node-{name}", argv)
        node = Node(url=f"http://{host}:{port}", name=name, proc=proc, argv=argv)
        if wait:
            wait_http(f"{node.url}/_sim/state", proc)
        self.nodes.append(node)
        return node

    def restart_node(self, node: Node) -> Node:
        """A new process on the same port (after the old one was killed)."""
        node.proc.stop(signal.SIGKILL)
        self.sup.forget(node.proc)
        proc = self.spawn(node.proc.name, node.argv)
        fresh = Node(url=node.url, name=node.name, proc=proc, argv=node.argv)
        wait_http(f"{fresh.url}/_sim/state", proc)
        self.nodes = [fresh if n is node else n for n in self.nodes]
        return fresh

    # --- chainproxy ------------------------------------------------------------------

    def start_sidecar(self, name: str, config: Path, url: str, *, timeout_s: float = 30.0) -> Child:
        """The sidecar on ``config``, once ``url`` answers ``/healthz``."""
        proc = self.spawn(name, sidecar_argv(config))
        wait_http(f"{url}/healthz", proc, timeout_s)
        return proc

    def start_chainproxy(
        self,
        name: str,
        config: Path,
        sidecar_url: str,
        *,
        port: int | None = None,
        sets: tuple[str, ...] = (),
        quiet: bool = True,
        cpus: set[int] | None = None,
        wait: bool = True,
        tree: Path | None = None,
        scripts: tuple[Path, ...] = (),
        env: dict[str, str] | None = None,
    ) -> tuple[Child, str]:
        """mitmdump with the addon on ``port`` (a free one by default);
        ``wait=False``: return at once, call ``wait_http(url + "/rpc/", proc)``
        before using it (``/rpc/`` answers even without the sidecar). ``tree``:
        another checkout of the project (e.g. an older commit) whose addon to run;
        ``scripts``: more mitmproxy scripts beside it (``bench/loop_holds.py``);
        ``env``: more of the process's environment."""
        # the tree's packages before the installed (editable) ones
        extra = {**({"PYTHONPATH": str(tree)} if tree else {}), **(env or {})}
        for tries_left in (2, 1, 0):
            chosen = port or free_port()
            argv = proxy_argv(
                BIN / "mitmdump",
                config,
                sidecar_url,
                port=chosen,
                sets=sets,
                quiet=quiet,
                tree=tree or REPO,
            )
            for script in scripts:
                argv += ["-s", str(script)]
            proc = self.spawn(name, argv, cpus, extra or None)
            url = f"http://127.0.0.1:{chosen}"
            if not wait:
                break
            try:
                wait_http(f"{url}/rpc/", proc)
            except StartError as e:
                # a port free when picked can be taken before mitmdump binds it
                # (another process of the machine): a new one, never a test's flake
                if port or not tries_left or "address already in use" not in str(e):
                    raise
                self.sup.forget(proc)
                continue
            break
        return proc, url


@dataclass
class Stack(ProcessStack):
    """The benchmarks' processes: ``ProcessStack`` and the baselines."""

    # --- upstreams -------------------------------------------------------------------

    def start_trivial(self, seconds: float) -> str:
        port = free_port()
        proc = self.spawn(
            "trivial-upstream",
            [
                sys.executable,
                str(REPO / "bench" / "trivial_upstream.py"),
                "--port",
                str(port),
                "--seconds",
                str(int(seconds)),
            ],
        )
        wait_port(port, proc)
        return f"http://127.0.0.1:{port}"

    # --- chainproxy ------------------------------------------------------------------

    def start_sidecar_and_proxies(
        self,
        sidecar: tuple[str, Path, str],
        proxies: list[tuple[str, Path]],
        *,
        cpus: set[int] | None = None,
        trees: dict[str, Path] | None = None,
    ) -> list[tuple[Child, str]]:
        """The sidecar (name, config, URL) and chainproxy processes (name, config)
        started all at once, each waited for until it answers; the proxies'
        (process, URL) in order. What each start costs is mostly Python's
        imports: side by side they take the cores there are. ``trees``: by
        proxy name, another checkout whose addon it runs."""
        name, config, url = sidecar
        side = self.spawn(name, sidecar_argv(config))
        trees = trees or {}
        started = [
            self.start_chainproxy(n, c, url, cpus=cpus, wait=False, tree=trees.get(n))
            for n, c in proxies
        ]
        wait_http(f"{url}/healthz", side, 30.0)
        for proc, proxy_url in started:
            wait_http(f"{proxy_url}/rpc/", proc)
        return started

    def write_config(
        self,
        name: str,
        upstream_urls: list[str],
        *,
        data_dir: Path,
        proxy: dict[str, Any] | None = None,
        top: dict[str, Any] | None = None,
    ) -> tuple[Path, str]:
        sidecar = sidecar_section()
        config = {
            "proxy": {
                "networks": ["finney"],
                # The limiter runs on every call; the quota is just out of the way.
                "rate_limit": {"requests": 1_000_000_000, "window_s": 60},
                **(proxy or {}),
            },
            "sidecar": sidecar,
            "data_dir": str(data_dir),
            "networks": {"finney": {"genesis": FINNEY_GENESIS}},
            "registry": {
                "endpoints": [
                    {
                        "url": u,
                        "provider": f"{name}-{i}",
                        "kind": "node-rpc",
                        "network": "finney",
                        "archive": True,
                    }
                    for i, u in enumerate(upstream_urls)
                ]
            },
            **(top or {}),
        }
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        return path, sidecar["url"]

    def start_bare_mitmdump(
        self, name: str, target: str, *, cpus: set[int] | None = None, wait: bool = True
    ) -> tuple[Child, str]:
        port = free_port()
        argv = reverse_proxy_argv(BIN / "mitmdump", target, port=port, quiet=True)
        proc = self.spawn(name, argv, cpus)
        if wait:
            wait_port(port, proc)
        return proc, f"http://127.0.0.1:{port}"

    # --- nginx -----------------------------------------------------------------------

    def start_nginx(
        self, name: str, *, http: str = "", stream: str = "", cpus: set[int] | None = None
    ) -> tuple[Child, int]:
        """nginx with one worker, in the foreground; ``http``/``stream`` are the
        bodies of those blocks, with ``{port}`` for the listen port."""
        exe = nginx_path()
        if exe is None:
            raise RuntimeError("nginx not installed")
        port = free_port()
        prefix = self.tmp / name
        prefix.mkdir(exist_ok=True)
        conf = [
            "load_module " + str(NGINX_STREAM_MODULE) + ";" if stream else "",
            "daemon off;",
            "worker_processes 1;",
            f"pid {prefix}/nginx.pid;",
            f"error_log {prefix}/error.log warn;",
            "events { worker_connections 4096; }",
        ]
        temp = " ".join(
            f"{d}_temp_path {prefix}/{d};"
            for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        if http:
            conf.append(
                "http { access_log off; keepalive_requests 1000000; "
                + temp
                + " "
                + http.replace("{port}", str(port))
                + " }"
            )
        if stream:
            conf.append("stream { " + stream.replace("{port}", str(port)) + " }")
        path = prefix / "nginx.conf"
        path.write_text("\n".join(conf) + "\n")
        proc = self.spawn(name, [exe, "-p", str(prefix), "-c", str(path)], cpus)
        wait_port(port, proc)
        return proc, port
