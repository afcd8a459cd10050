"""chainproxy in front of a real Substrate runtime, offline: chopsticks.

``@acala-network/chopsticks`` runs the Rococo Asset Hub runtime (an Aura
parachain) from its raw genesis, which ships in ``@substrate/connect-known-chains``
and is extracted at run time (never committed). Blocks are made only when asked
(``dev_newBlock``, which the proxy's allowlist refuses: we call chopsticks
directly).

One chain, two endpoints: two chopsticks started from the same genesis do not
agree (each builds block #1 at start with the wall-clock time, even with
``--timestamp``), so two instances are two forks. Here one chopsticks node
serves the chain and two *endpoint fronts* (``tests/clients/forwarder.py``, a
TCP forwarder each; the second one 40 ms slower) are the two registry
endpoints; stopping a front is an endpoint dying. Two diverging instances are
used on purpose for the fork test.

Chopsticks quirks the setup has to live with (docs/OPERATIONS.md, "Real clients (chopsticks)"):

* block #0 is announced under the placeholder hash 0x45…45, and any block hash
  chopsticks does not know is answered with its genesis block, which it then
  files under that hash (``chain_getBlockHash(0)`` changes!). So the configs
  here set no ``networks.<n>.genesis``: a genesis probe would flip to
  ``wrong-chain`` after a client asked for a hash of another fork.
* unknown methods answer ``{"error": {"message": "Method not found: …"}}``
  without a ``code``; it answers POST on any path.

``python -m tests.clients.chopsticks_stack`` (``make demo-chopsticks``) starts
the whole setup in the foreground and prints a curl; Ctrl-C stops everything.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from chainproxy.supervisor import StopRequest, reserve
from tests.clients.chopsticks import Chopsticks, Front, start_chopsticks
from tests.clients.js_deps import ensure_js_deps, extract_genesis, js_unavailable
from tests.e2e.harness import REPO, Stack, free_port

NETWORK = "assethub"


# --- chainproxy configs -----------------------------------------------------------------


def proxy_config(
    data_dir: Path, endpoints: list[tuple[str, str]], *, sidecar_port: int
) -> dict[str, Any]:
    """A chainproxy config serving ``/rpc/v1/assethub`` from ``endpoints``
    (url, provider), each a node-rpc endpoint and, at its ws:// URL, a node-wss
    one. No genesis for the network: see the module docstring."""
    return {
        "proxy": {
            "networks": [NETWORK],
            "failover": {
                "max_attempts": 3,
                "attempt_timeout_s": 5,
                "deadline_s": 15,
                "eject_after": 3,
                "eject_cooldown_s": 2,
            },
            "cache": {
                "methods": {
                    "state_getStorage": 1,
                    "state_call": 2,
                    "state_getMetadata": 0,
                    "state_getRuntimeVersion": 0,
                }
            },
        },
        "sidecar": {
            "host": "127.0.0.1",
            "port": sidecar_port,
            "url": f"http://127.0.0.1:{sidecar_port}",
        },
        "data_dir": str(data_dir),
        "probe": {"interval_s": 5, "head_interval_s": 1, "timeout_s": 3},
        "networks": {NETWORK: {"max_lag_blocks": 3}},
        "registry": {
            "endpoints": [
                {"url": url, "provider": provider, "kind": "node-rpc", "network": NETWORK}
                for url, provider in endpoints
            ]
            # chopsticks serves WebSocket on the same port: the same endpoint as node-wss
            # (subscriptions), ws://
            + [
                {"url": ws_url(url), "provider": provider, "kind": "node-wss", "network": NETWORK}
                for url, provider in endpoints
            ]
        },
    }


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://", 1)


def routes(stack: Stack) -> dict[str, Any]:
    """The sidecar's routing snapshot (asked directly: the proxy refuses the path)."""
    with urllib.request.urlopen(
        f"{stack.sidecar_url}/api/v1/internal/routes/{NETWORK}", timeout=5
    ) as resp:
        return json.loads(resp.read())


def wait_routes(stack: Stack, ready: Any, timeout: float = 30.0) -> dict[str, Any]:
    """Poll the routing snapshot until ``ready(upstreams by id)`` holds; if it had to
    wait, until the addon has picked the new snapshot up too."""
    deadline = time.monotonic() + timeout
    doc: dict[str, Any] = {}
    waited = False
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            doc = routes(stack)
            if ready({u["id"]: u for u in doc["upstreams"]}):
                if waited:
                    stack.wait_snapshot_applied(NETWORK)
                return doc
        waited = True
        time.sleep(0.2)
    raise RuntimeError(f"routing snapshot never got ready: {doc}")


@dataclass
class ChainStack:
    """One chopsticks chain behind two endpoint fronts, the sidecar and mitmdump.
    The first front is fast, the second adds latency: the proxy's latency-aware
    choice then prefers the first, so a test knows which endpoint is in use."""

    stack: Stack
    node: Chopsticks
    fronts: list[Front]
    _asked: int = 0

    @property
    def rpc_url(self) -> str:
        return self.stack.rpc_url(NETWORK)

    @property
    def ws_rpc_url(self) -> str:
        """The proxy's WebSocket URL for the network (subscriptions)."""
        return ws_url(self.rpc_url)

    @property
    def fast(self) -> Front:
        return self.fronts[0]

    def used_endpoint(self) -> str:
        """The endpoint id that answers an uncached call through the proxy now
        (asked from addresses of its own, 127.1.x.y: no test's rate-limit quota)."""
        self._asked += 1
        source = f"127.1.{self._asked // 200 % 250}.{self._asked % 200 + 2}"
        parts = urlsplit(self.rpc_url)
        conn = http.client.HTTPConnection(
            parts.hostname, parts.port, timeout=10, source_address=(source, 0)
        )
        try:
            doc = {"jsonrpc": "2.0", "id": 1, "method": "chain_getHeader", "params": []}
            conn.request("POST", parts.path, json.dumps(doc), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            return resp.getheader("X-Chainproxy-Upstream") or ""
        finally:
            conn.close()

    def prefer_fast(self, timeout: float = 60.0) -> None:
        """Call until the proxy has measured both endpoints and sticks to the fast one."""
        deadline = time.monotonic() + timeout
        streak = 0
        while streak < 3:
            if time.monotonic() > deadline:
                raise RuntimeError("the proxy does not settle on the fast endpoint")
            streak = streak + 1 if self.used_endpoint() == self.fast.endpoint_id else 0

    def restart_proxy(self) -> None:
        """A fresh mitmdump on the same port: no memory of earlier failures."""
        assert self.stack.proxy is not None
        port = int(self.stack.proxy_url.rsplit(":", 1)[1])
        self.stack.proxy.stop()
        self.stack.start_proxy(port)

    def front_by_id(self, eid: str) -> Front:
        return next(f for f in self.fronts if f.endpoint_id == eid)

    def wait_all_synced(self, timeout: float = 30.0) -> None:
        """Both endpoints up, probed healthy and synced at the node's best block."""
        best = self.node.best()
        ids = {f.endpoint_id for f in self.fronts}

        def ready(ups: dict[str, Any]) -> bool:
            return all(
                i in ups and ups[i]["healthy"] and ups[i]["synced"] and ups[i]["best"] == best
                for i in ids
            )

        wait_routes(self.stack, ready, timeout)

    def stop(self) -> None:
        for front in self.fronts:  # a restarted front is not in stack.procs
            front.stop()
        self.stack.stop()


def start_chain_stack(
    tmp: Path,
    genesis: Path,
    *,
    proxy_port: int | None = None,
    sidecar_port: int | None = None,
    count: bool = False,
    proxy_extra: dict[str, Any] | None = None,
) -> ChainStack:
    """chopsticks + two fronts + sidecar + mitmdump; everything is stopped again if
    any of it fails to start. ``count``: the fronts count the calls passing them;
    ``proxy_extra``: keys added to the config's ``proxy`` section."""
    tmp.mkdir(parents=True, exist_ok=True)
    stack = Stack(tmp)
    try:
        node = start_chopsticks("chopsticks", genesis, tmp)
        stack.procs.append(node.proc)
        node.wait_ready()
        node.new_blocks(2)  # a little history: blocks 0..3
        fronts = []
        for name, delay_ms in (("front-fast", 0.0), ("front-slow", 40.0)):
            front = Front(name, node.port, tmp, delay_ms, count=count).start()
            assert front.proc is not None
            stack.procs.append(front.proc)
            fronts.append(front)
        config = proxy_config(
            tmp / "data",
            [(f.url, f"chopsticks-{f.name}") for f in fronts],
            sidecar_port=sidecar_port or free_port(),
        )
        config["proxy"].update(proxy_extra or {})
        stack.write_config(config)
        # a sidecar port given (make demo-chopsticks' --sidecar-port) is the
        # caller's: taken, its clash is said rather than moved elsewhere
        stack.start_sidecar(url=config["sidecar"]["url"] if sidecar_port else None)
        stack.start_proxy(proxy_port)
        chain = ChainStack(stack, node, fronts)
        chain.wait_all_synced(timeout=60)
        chain.prefer_fast()
    except BaseException:
        stack.stop()
        raise
    return chain


# --- make demo-chopsticks --------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.clients.chopsticks_stack", description=__doc__
    )
    ap.add_argument("--listen-port", type=int, default=int(os.environ.get("PROXY_PORT", "8080")))
    ap.add_argument("--sidecar-port", type=int, default=8081)
    ap.add_argument("--block-time", type=float, default=6.0, help="seconds per new block (0: none)")
    ap.add_argument("--dir", default="data/chopsticks-demo", help="logs, genesis and state")
    args = ap.parse_args(argv)
    # the proxy and sidecar bind after chopsticks' and the fronts' ports are picked
    reserve(args.listen_port, args.sidecar_port)

    if (why := js_unavailable()) is not None:
        print(f"demo-chopsticks: {why}", file=sys.stderr)
        return 2
    workdir = (REPO / args.dir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    stop = StopRequest()
    chain: ChainStack | None = None
    try:
        ensure_js_deps()
        print("starting chopsticks (a few seconds)…", flush=True)
        genesis = extract_genesis(workdir / "genesis.json")
        chain = start_chain_stack(
            workdir, genesis, proxy_port=args.listen_port, sidecar_port=args.sidecar_port
        )
        url = chain.rpc_url
        print(
            f"\nchainproxy is up: {url}\n"
            f"  WebSocket, subscriptions too: {chain.ws_rpc_url}\n"
            f"  chain: one chopsticks node ({chain.node.url}) behind two endpoints "
            f"{chain.fronts[0].url} and {chain.fronts[1].url}\n"
            "  an endpoint dying: kill "
            + " or kill ".join(f"{f.proc.pid} ({f.name})" for f in chain.fronts if f.proc)
            + "; the proxy fails over, clients see no error\n"
            f"  logs and config: {workdir}\n"
            f"try:\n  curl -s -X POST {url} -H 'content-type: application/json' "
            '-d \'{"jsonrpc":"2.0","id":1,"method":"chain_getHeader","params":[]}\'\n'
            + (
                f"a new block every {args.block_time:g} s. "
                if args.block_time > 0
                else f"new block: curl {chain.node.url} with dev_newBlock. "
            )
            + "Ctrl-C stops everything.\n",
            flush=True,
        )
        node = chain.node
        next_block = time.monotonic() + args.block_time

        def make_blocks() -> None:
            nonlocal next_block
            if args.block_time > 0 and time.monotonic() >= next_block:
                with contextlib.suppress(OSError, RuntimeError, urllib.error.URLError):
                    print(f"block #{node.new_blocks(1)}", flush=True)
                next_block = time.monotonic() + args.block_time

        while (dead := chain.stack.sup.run_until_stopped(stop, make_blocks)) is not None:
            if dead.name.startswith("front-"):  # an endpoint died (by hand): the proxy fails over
                chain.stack.sup.forget(dead)
                print(
                    f"demo-chopsticks: {dead.name} exited: that endpoint is down, the proxy "
                    "fails over to the other",
                    flush=True,
                )
                continue
            print(f"demo-chopsticks: {dead.name} exited; stopping", file=sys.stderr)
            return 1
        return 0
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        print(f"demo-chopsticks: {e}", file=sys.stderr)
        return 1
    finally:
        if chain is not None:
            chain.stop()


if __name__ == "__main__":
    sys.exit(main())
