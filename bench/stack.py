"""Processes for the proxy benchmarks, all on 127.0.0.1 with free ports: the
trivial upstream, simulated nodes, the sidecar, chainproxy (mitmdump with the
addon), bare mitmdump, nginx. Every child runs in its own session, gets SIGTERM
from the kernel if the runner dies (PR_SET_PDEATHSIG), and is stopped with its
process group by ``Stack.stop``."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from simnode.command import simnode_argv

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FINNEY_GENESIS = "0x2f0555cc76fc2840a25a6ea3b9637146806f1f44b090c175ffde2a7e5ab36c03"
NGINX_STREAM_MODULE = Path("/usr/lib/nginx/modules/ngx_stream_module.so")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def nginx_path() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None
    )


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)

    def rss_kb(self) -> int:
        """Resident set size of the process (not its children), in KiB."""
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0


def http_json(url: str, doc: Any | None = None, timeout: float = 10.0) -> Any:
    data = None if doc is None else json.dumps(doc).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def post_raw(url: str, body: bytes, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@dataclass
class Node:
    """A simulated node (``python -m simnode``)."""

    proc: Proc
    url: str
    name: str
    argv: list[str]

    def control(self, **faults: Any) -> Any:
        return http_json(f"{self.url}/_sim/control", faults)

    def reset(self) -> Any:
        return http_json(f"{self.url}/_sim/reset", {})

    def state(self) -> Any:
        return http_json(f"{self.url}/_sim/state")


@dataclass
class Stack:
    tmp: Path
    procs: list[Proc] = field(default_factory=list)

    # --- generic ---------------------------------------------------------------------

    def spawn(
        self,
        name: str,
        argv: list[str],
        cpus: set[int] | None = None,
        env: dict[str, str] | None = None,
    ) -> Proc:
        """Start ``argv``; ``cpus``: pin it (and every thread it starts) to these cores;
        ``env``: variables to add to the environment."""
        log = self.tmp / f"{name}.log"

        def setup() -> None:
            _die_with_parent()
            if cpus:
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(0, cpus)

        with log.open("wb") as fh:
            popen = subprocess.Popen(
                argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
                start_new_session=True,
                preexec_fn=setup,
                env={**os.environ, **env} if env else None,
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def wait_http(self, url: str, proc: Proc, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited:\n{proc.output()[-3000:]}")
            try:
                with urllib.request.urlopen(url, timeout=1):
                    return
            except urllib.error.HTTPError:
                return  # it answered
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{proc.name}: {url} not answering after {timeout}s")

    def wait_port(self, port: int, proc: Proc, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited:\n{proc.output()[-3000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{proc.name}: port {port} not open after {timeout}s")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()

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
        self.wait_port(port, proc)
        return f"http://127.0.0.1:{port}"

    def start_node(
        self, name: str, *, epoch: float, port: int | None = None, wait: bool = True
    ) -> Node:
        port = port or free_port()
        argv = simnode_argv(
            port,
            name=name,
            seed="finney",
            epoch=epoch,
            block_time=12,
            start_height=4_000_000,
            genesis=FINNEY_GENESIS,
        )
        proc = self.spawn(f"node-{name}", argv)
        node = Node(proc, f"http://127.0.0.1:{port}", name, argv)
        if wait:
            self.wait_http(f"{node.url}/_sim/state", proc)
        return node

    def restart_node(self, node: Node) -> Node:
        """A new process on the same port (after the old one was killed)."""
        node.proc.stop(signal.SIGKILL)
        with contextlib.suppress(ValueError):
            self.procs.remove(node.proc)
        name = node.proc.name
        proc = self.spawn(name, node.argv)
        fresh = Node(proc, node.url, node.name, node.argv)
        self.wait_http(f"{fresh.url}/_sim/state", proc)
        return fresh

    # --- chainproxy ------------------------------------------------------------------

    def write_config(
        self,
        name: str,
        upstream_urls: list[str],
        *,
        data_dir: Path,
        proxy: dict[str, Any] | None = None,
        top: dict[str, Any] | None = None,
    ) -> tuple[Path, str]:
        sidecar_port = free_port()
        sidecar_url = f"http://127.0.0.1:{sidecar_port}"
        config = {
            "proxy": {
                "networks": ["finney"],
                # The limiter runs on every call; the quota is just out of the way.
                "rate_limit": {"requests": 1_000_000_000, "window_s": 60},
                **(proxy or {}),
            },
            "sidecar": {"host": "127.0.0.1", "port": sidecar_port, "url": sidecar_url},
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
        return path, sidecar_url

    def start_sidecar(self, name: str, config: Path, url: str) -> Proc:
        proc = self.spawn(name, [sys.executable, "-m", "sidecar", "--config", str(config)])
        self.wait_http(f"{url}/healthz", proc)
        return proc

    def start_chainproxy(
        self,
        name: str,
        config: Path,
        sidecar_url: str,
        *,
        sets: tuple[str, ...] = (),
        cpus: set[int] | None = None,
        wait: bool = True,
        tree: Path | None = None,
    ) -> tuple[Proc, str]:
        """mitmdump with the addon; ``wait=False``: return at once, call
        ``wait_http(url + "/rpc/", proc)`` before using it. ``tree``: another
        checkout of the project (e.g. an older commit) whose addon to run."""
        port = free_port()
        argv = [
            str(BIN / "mitmdump"),
            "-q",
            "-s",
            str((tree or REPO) / "addon" / "rpcproxy.py"),
            "--mode",
            f"reverse:{sidecar_url}",
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            str(port),
            "--set",
            f"chainproxy_config={config}",
        ]
        for s in sets:
            argv += ["--set", s]
        # the tree's packages before the installed (editable) ones
        env = {"PYTHONPATH": str(tree)} if tree else None
        proc = self.spawn(name, argv, cpus, env)
        url = f"http://127.0.0.1:{port}"
        if wait:
            self.wait_http(f"{url}/rpc/", proc)
        return proc, url

    def start_bare_mitmdump(
        self, name: str, target: str, *, cpus: set[int] | None = None, wait: bool = True
    ) -> tuple[Proc, str]:
        port = free_port()
        argv = [
            str(BIN / "mitmdump"),
            "-q",
            "--mode",
            f"reverse:{target}",
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            str(port),
        ]
        proc = self.spawn(name, argv, cpus)
        if wait:
            self.wait_port(port, proc)
        return proc, f"http://127.0.0.1:{port}"

    # --- nginx -----------------------------------------------------------------------

    def start_nginx(
        self, name: str, *, http: str = "", stream: str = "", cpus: set[int] | None = None
    ) -> tuple[Proc, int]:
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
        self.wait_port(port, proc)
        return proc, port
