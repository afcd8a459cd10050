"""Real processes on 127.0.0.1 for end-to-end tests: simulated nodes, the
sidecar and mitmdump with the addon. Every process runs in its own session
and is killed with its group, even when a test fails."""

from __future__ import annotations

import contextlib
import json
import os
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

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FINNEY_GENESIS = "0x2f0555cc76fc2840a25a6ea3b9637146806f1f44b090c175ffde2a7e5ab36c03"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        return self.popen.returncode


def spawn(name: str, argv: list[str], logdir: Path) -> Proc:
    log = logdir / f"{name}.log"
    fh = log.open("wb")
    popen = subprocess.Popen(
        argv, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True
    )
    fh.close()
    return Proc(name, popen, log)


def wait_http(url: str, proc: Proc, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.output()}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{proc.name}: {url} not answering after {timeout}s:\n{proc.output()}")


def http_json(url: str, doc: Any | None = None, timeout: float = 10.0) -> Any:
    data = None if doc is None else json.dumps(doc).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


@dataclass
class Node:
    proc: Proc
    url: str
    name: str

    def control(self, **faults: Any) -> Any:
        return http_json(f"{self.url}/_sim/control", faults)

    def reset(self) -> Any:
        return http_json(f"{self.url}/_sim/reset", {})

    def state(self) -> Any:
        return http_json(f"{self.url}/_sim/state")

    def rpc(self, method: str, params: list[Any] | None = None) -> Any:
        doc = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []}
        return http_json(self.url, doc)


@dataclass
class Stack:
    tmp: Path
    nodes: list[Node] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    proxy: Proc | None = None
    sidecar: Proc | None = None
    proxy_url: str = ""
    sidecar_url: str = ""
    config_path: Path | None = None
    config: dict[str, Any] = field(default_factory=dict)
    proxy_sets: tuple[str, ...] = ()  # extra mitmdump ``--set`` options

    def rpc_url(self, network: str = "finney") -> str:
        return f"{self.proxy_url}/rpc/v1/{network}"

    def start_node(
        self,
        name: str,
        *,
        archive: bool = False,
        seed: str = "finney",
        epoch: float,
        genesis: str = FINNEY_GENESIS,
        block_time: float = 2.0,
        start_height: int = 5000,
    ) -> Node:
        port = free_port()
        argv = simnode_argv(
            port,
            name=name,
            seed=seed,
            epoch=epoch,
            block_time=block_time,
            start_height=start_height,
            genesis=genesis,
            archive=archive,
        )
        proc = spawn(f"node-{name}", argv, self.tmp)
        self.procs.append(proc)
        node = Node(proc, f"http://127.0.0.1:{port}", name)
        wait_http(f"{node.url}/_sim/state", proc)
        self.nodes.append(node)
        return node

    def write_config(self, config: dict[str, Any]) -> Path:
        self.config = config
        path = self.tmp / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        self.config_path = path
        return path

    def start_sidecar(self) -> Proc:
        assert self.config_path is not None
        proc = spawn(
            "sidecar",
            [sys.executable, "-m", "sidecar", "--config", str(self.config_path)],
            self.tmp,
        )
        self.procs.append(proc)
        self.sidecar = proc
        self.sidecar_url = self.config["sidecar"]["url"]
        wait_http(f"{self.sidecar_url}/healthz", proc)
        return proc

    def start_proxy(self, port: int | None = None) -> Proc:
        assert self.config_path is not None
        port = port or free_port()
        argv = [
            str(BIN / "mitmdump"),
            "-q",
            "-s",
            str(REPO / "addon" / "rpcproxy.py"),
            "--mode",
            f"reverse:{self.config['sidecar']['url']}",
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            str(port),
            "--set",
            f"chainproxy_config={self.config_path}",
        ]
        for option in self.proxy_sets:
            argv += ["--set", option]
        if any(o.startswith("termlog_verbosity=") for o in self.proxy_sets):
            argv.remove("-q")  # -q would override it; flow_detail=0 keeps flows unprinted
            argv += ["--set", "flow_detail=0"]
        proc = spawn("mitmdump", argv, self.tmp)
        self.procs.append(proc)
        self.proxy = proc
        self.proxy_url = f"http://127.0.0.1:{port}"
        # /rpc/ answers even without the sidecar: wait on the proxy itself.
        wait_http(f"{self.proxy_url}/rpc/", proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


def base_config(
    tmp: Path, nodes: list[Node], *, top: dict[str, Any] | None = None, **proxy: Any
) -> dict[str, Any]:
    sidecar_port = free_port()
    endpoints = [
        {
            "url": n.url,
            "provider": n.name,
            "kind": "node-rpc",
            "network": "finney",
            "archive": n.name.startswith("archive"),
        }
        for n in nodes
    ]
    return {
        "proxy": {"networks": ["finney", "test"], **proxy},
        "sidecar": {
            "host": "127.0.0.1",
            "port": sidecar_port,
            "url": f"http://127.0.0.1:{sidecar_port}",
        },
        "data_dir": str(tmp / "data"),
        "registry": {"endpoints": endpoints},
        **(top or {}),
    }
