"""Real processes on 127.0.0.1 for end-to-end tests: simulated nodes, the
sidecar and mitmdump with the addon. ``Stack`` is the benchmarks'
``bench.stack.ProcessStack`` (how each process starts, waits and stops) with
one config, one sidecar and one proxy remembered for the tests. Every process
runs in its own session, dies with the test run (``chainproxy.supervisor``)
and is killed with its group, even when a test fails."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from bench.stack import BIN as BIN
from bench.stack import REPO as REPO
from bench.stack import Node as Node
from bench.stack import ProcessStack, sidecar_section
from chainproxy.supervisor import Child, StartError
from chainproxy.supervisor import free_port as free_port
from chainproxy.supervisor import spawn as _spawn
from chainproxy.supervisor import wait_http as wait_http
from simnode.remote import http_json as http_json

Proc = Child  # the name the tests know

# mitmproxy options a check run gives every proxy the e2e tests start, e.g.
# CHAINPROXY_TEST_SETS="chainproxy_http_direct=false chainproxy_ws_direct=false"
# runs the whole suite on mitmproxy's own HTTP and WebSocket layers
# (docs/OPERATIONS.md, "Tests"); a test's own options win over these
RUN_SETS = tuple(os.environ.get("CHAINPROXY_TEST_SETS", "").split())


def spawn(name: str, argv: list[str], logdir: Path) -> Child:
    """Start ``argv`` from the repository, its output in ``<logdir>/<name>.log``."""
    start = ProcessStack.spawner or _spawn  # the suite's zygote (tests/zygote.py)
    return start(name, argv, log=logdir / f"{name}.log", cwd=REPO)


@dataclass
class Stack(ProcessStack):
    """One config (``write_config``), one sidecar and one proxy on it."""

    proxy: Proc | None = None
    sidecar: Proc | None = None
    proxy_url: str = ""
    sidecar_url: str = ""
    config_path: Path | None = None
    config: dict[str, Any] = field(default_factory=dict)
    proxy_sets: tuple[str, ...] = ()  # extra mitmdump ``--set`` options

    NODE_BLOCK_S: ClassVar[float] = 2.0
    NODE_START_HEIGHT: ClassVar[int] = 5000

    def start_nodes(self, names: Iterable[str], **kw: Any) -> list[Node]:
        """Nodes ``names`` (``start_node``'s keywords for each), started side by
        side, each answering when this returns: the same nodes as one
        ``start_node`` after the other, in a fraction of the time."""
        nodes = [self.start_node(name, wait=False, **kw) for name in names]
        self.wait_nodes(nodes)
        return nodes

    def wait_nodes(self, nodes: Iterable[Node]) -> None:
        """Until each of ``nodes`` (started with ``wait=False``) answers."""
        for node in nodes:
            wait_http(f"{node.url}/_sim/state", node.proc)

    def rpc_url(self, network: str = "finney") -> str:
        return f"{self.proxy_url}/rpc/v1/{network}"

    def wait_snapshot_applied(self, network: str = "finney", timeout: float = 30.0) -> None:
        """Until the proxy has applied a routing snapshot it asked the sidecar
        for after this call (two more than now, by ``/rpc/healthz``: the first
        may have been asked for before), however long a loaded machine takes."""

        def applied() -> int:
            return int(http_json(f"{self.proxy_url}/rpc/healthz")["snapshot"][network]["applied"])

        want = applied() + 2
        deadline = time.monotonic() + timeout
        while (got := applied()) < want:
            assert time.monotonic() < deadline, f"{got} snapshots applied, not {want}"
            time.sleep(0.1)

    def write_config(self, config: dict[str, Any]) -> Path:
        self.config = config
        path = self.tmp / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        self.config_path = path
        return path

    def start_sidecar(
        self,
        name: str = "sidecar",
        config: Path | None = None,
        url: str | None = None,
        *,
        timeout_s: float = 30.0,
    ) -> Proc:
        """The sidecar, on the written config unless given another. A port another
        process took between its pick and the sidecar's bind is picked again and
        the config rewritten in place (a test holding the dict it wrote sees it),
        as ``start_chainproxy`` does for the proxy's port; never a port something
        knows already: the caller's config or URL, a sidecar's started again, one
        a proxy started before it was given."""
        movable = config is None and url is None and self.sidecar is None and self.proxy is None
        for tries_left in (2, 1, 0):
            path = config or self.config_path
            assert path is not None
            where = url or self.config["sidecar"]["url"]
            try:
                self.sidecar = super().start_sidecar(name, path, where, timeout_s=timeout_s)
                break
            except StartError as e:
                if not movable or not tries_left or "address already in use" not in str(e):
                    raise
                self.sup.forget(self.procs[-1])
                self.config["sidecar"] = sidecar_section()
                self.write_config(self.config)
        self.sidecar_url = where
        return self.sidecar

    def sets_in_force(self) -> tuple[str, ...]:
        """The proxy's ``--set`` options: a check run's for every proxy (e.g. direct
        reads off), except those the test sets itself (an option given twice
        stops mitmdump), then the test's own."""
        own = {o.partition("=")[0] for o in self.proxy_sets}
        return (*(o for o in RUN_SETS if o.partition("=")[0] not in own), *self.proxy_sets)

    def start_proxy(self, port: int | None = None) -> Proc:
        assert self.config_path is not None
        sets = self.sets_in_force()
        # -q would override a termlog_verbosity; flow_detail=0 keeps flows unprinted then
        verbose = any(o.startswith("termlog_verbosity=") for o in sets)
        self.proxy, self.proxy_url = self.start_chainproxy(
            "mitmdump",
            self.config_path,
            self.config["sidecar"]["url"],
            port=port,
            sets=(*sets, "flow_detail=0") if verbose else sets,
            quiet=not verbose,
        )
        if self.sidecar is not None and self.sidecar.alive():
            self.wait_routing_view(self.proxy, self.proxy_url)
        return self.proxy

    def wait_routing_view(self, proxy: Child, url: str, timeout: float = 15.0) -> None:
        """Until ``proxy`` (at ``url``) routes on the sidecar's view (heights,
        finality, health), as a test expects of a proxy that is up beside its
        sidecar. Its listener opens before its first routing snapshot arrives,
        and that one may come before the sidecar's first probe has answered: a
        call meanwhile is routed without it and caches nothing at a height it
        does not yet know is final. So: a snapshot with a finalized height, or
        three without one (nodes down or hiding it on purpose). A proxy that
        exits meanwhile is a ``StartError``; after ``timeout`` the test goes on
        (a proxy started beside a sidecar it cannot reach, on purpose)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proxy.alive():
                raise StartError(proxy.exit_reason())
            try:
                doc = http_json(f"{url}/rpc/healthz", timeout=2)
            except (OSError, ValueError):  # a stalled machine's slow answer: ask again
                doc = {}
            views = (doc.get("snapshot") or {}).values() if isinstance(doc, dict) else ()
            if any(v.get("finalized") is not None for v in views) or any(
                int(v.get("applied", 0)) >= 3 for v in views
            ):
                return
            time.sleep(0.05)


def base_config(
    tmp: Path, nodes: list[Node], *, top: dict[str, Any] | None = None, **proxy: Any
) -> dict[str, Any]:
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
        # a copy: a test that changes its config (``config["proxy"]["failover"][…]``)
        # must not change the shared defaults (``PROXY_DEFAULTS``) of every later stack
        "proxy": {"networks": ["finney", "test"], **copy.deepcopy(proxy)},
        "sidecar": sidecar_section(),
        "data_dir": str(tmp / "data"),
        "registry": {"endpoints": endpoints},
        **(top or {}),
    }
