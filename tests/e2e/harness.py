"""Real processes on 127.0.0.1 for end-to-end tests: simulated nodes, the
sidecar and mitmdump with the addon. Every process runs in its own session,
dies with the test run (``chainproxy.supervisor``) and is killed with its
group, even when a test fails."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chainproxy.commands import proxy_argv, sidecar_argv
from chainproxy.supervisor import Child, Supervisor, free_port
from chainproxy.supervisor import spawn as _spawn
from chainproxy.supervisor import wait_http as wait_http
from common.config import FINNEY_GENESIS
from simnode.command import simnode_argv
from simnode.remote import RemoteNode
from simnode.remote import http_json as http_json

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
Proc = Child  # the name the tests know


def spawn(name: str, argv: list[str], logdir: Path) -> Child:
    """Start ``argv`` from the repository, its output in ``<logdir>/<name>.log``."""
    return _spawn(name, argv, log=logdir / f"{name}.log", cwd=REPO)


@dataclass
class Node(RemoteNode):
    proc: Child


@dataclass
class Stack:
    tmp: Path  # the processes' logs, the config, the data directory
    nodes: list[Node] = field(default_factory=list)
    proxy: Proc | None = None
    sidecar: Proc | None = None
    proxy_url: str = ""
    sidecar_url: str = ""
    config_path: Path | None = None
    config: dict[str, Any] = field(default_factory=dict)
    proxy_sets: tuple[str, ...] = ()  # extra mitmdump ``--set`` options
    sup: Supervisor = field(init=False)

    def __post_init__(self) -> None:
        self.sup = Supervisor(logdir=self.tmp, cwd=REPO)

    @property
    def procs(self) -> list[Proc]:
        """Every process started for this stack (tests add their own): ``stop`` ends them."""
        return self.sup.children

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
        proc = self.sup.start(f"node-{name}", argv)
        node = Node(url=f"http://127.0.0.1:{port}", name=name, proc=proc)
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
        proc = self.sup.start("sidecar", sidecar_argv(self.config_path))
        self.sidecar = proc
        self.sidecar_url = self.config["sidecar"]["url"]
        wait_http(f"{self.sidecar_url}/healthz", proc)
        return proc

    def start_proxy(self, port: int | None = None) -> Proc:
        assert self.config_path is not None
        port = port or free_port()
        # -q would override a termlog_verbosity; flow_detail=0 keeps flows unprinted then
        verbose = any(o.startswith("termlog_verbosity=") for o in self.proxy_sets)
        argv = proxy_argv(
            BIN / "mitmdump",
            self.config_path,
            self.config["sidecar"]["url"],
            port=port,
            sets=(*self.proxy_sets, "flow_detail=0") if verbose else self.proxy_sets,
            quiet=not verbose,
        )
        proc = self.sup.start("mitmdump", argv)
        self.proxy = proc
        self.proxy_url = f"http://127.0.0.1:{port}"
        # /rpc/ answers even without the sidecar: wait on the proxy itself.
        wait_http(f"{self.proxy_url}/rpc/", proc)
        return proc

    def stop(self) -> None:
        self.sup.stop_all()


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
