"""Run the whole stack in the foreground: ``make run`` / ``make demo`` / ``make inspect``.

Starts (for ``--simulate``) a simulated node for every loopback ``node-rpc``
endpoint of the config, then the sidecar, then mitmdump (or mitmweb) with the
addon; prints the proxy URL and a curl that works; and on Ctrl-C / SIGTERM, or
when any child dies, stops every child (no orphans: each child also gets
SIGTERM from the kernel if this process is killed outright).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from common.config import Config, ConfigError, load_config
from simnode.command import simnode_argv

_PR_SET_PDEATHSIG = 1
REPO = Path(__file__).resolve().parent.parent
ADDON_SCRIPT = REPO / "addon" / "rpcproxy.py"


def _die_with_parent() -> None:
    # Linux: the child gets SIGTERM when the launcher dies, even by SIGKILL.
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Stack:
    def __init__(self) -> None:
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, start_new_session=True, preexec_fn=_die_with_parent)
        self.children.append((name, proc))
        return proc

    def dead_child(self) -> str | None:
        for name, proc in self.children:
            if proc.poll() is not None:
                return f"{name} exited with code {proc.returncode}"
        return None

    def stop(self, grace_s: float = 5.0) -> None:
        for _, proc in reversed(self.children):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for _, proc in self.children:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_http(url: str, stack: Stack, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (why := stack.dead_child()) is not None:
            raise RuntimeError(why)
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f}s")


def _simulated_nodes(config: Config) -> list[list[str]]:
    epoch = time.time() - 3600  # a chain with some history: heights agree across nodes
    argvs = []
    for e in config.endpoints:
        parts = urlsplit(e.url)
        if e.kind != "node-rpc" or parts.hostname not in ("127.0.0.1", "localhost"):
            continue
        argv = simnode_argv(
            parts.port or 80,
            name=f"{e.provider}-{e.network}",
            seed=e.network,
            epoch=epoch,
            block_time=12,
            start_height=4_000_000,
            genesis=config.networks[e.network].genesis,
            archive=e.archive,
        )
        argvs.append(argv)
    return argvs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chainproxy.launch", description=__doc__)
    ap.add_argument("--config", default="configs/finney.yaml")
    ap.add_argument("--listen-host", default=os.environ.get("PROXY_HOST", "127.0.0.1"))
    ap.add_argument("--listen-port", type=int, default=int(os.environ.get("PROXY_PORT", "8080")))
    ap.add_argument("--simulate", action="store_true", help="start simulated upstream nodes")
    ap.add_argument("--inspect", action="store_true", help="mitmweb instead of mitmdump")
    ap.add_argument("--web-port", type=int, default=8082)
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a mitmproxy option for the proxy, e.g. chainproxy_lean=true (repeatable)",
    )
    args = ap.parse_args(argv)
    if bad := [s for s in args.sets if "=" not in s.strip("=")]:
        print(f"chainproxy: --set wants NAME=VALUE, got {bad[0]!r}", file=sys.stderr)
        return 2

    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"chainproxy: {e}", file=sys.stderr)
        return 2

    bindir = Path(sys.executable).parent
    tool = "mitmweb" if args.inspect else "mitmdump"
    mitm = shutil.which(tool, path=str(bindir)) or shutil.which(tool)
    if mitm is None:
        print(f"chainproxy: {tool} not found (run `make` to install)", file=sys.stderr)
        return 2

    stack = Stack()
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        if args.simulate:
            for node in _simulated_nodes(config):
                stack.start("simnode", node)
        stack.start("sidecar", [sys.executable, "-m", "sidecar", "--config", args.config])
        _wait_http(f"{config.sidecar.url}/healthz", stack)
        proxy_argv = [
            mitm,
            "-s",
            str(ADDON_SCRIPT),
            "--mode",
            f"reverse:{config.sidecar.url}",
            "--listen-host",
            args.listen_host,
            "--listen-port",
            str(args.listen_port),
            "--set",
            f"chainproxy_config={args.config}",
        ]
        for option in args.sets:
            proxy_argv += ["--set", option]
        web_token = secrets.token_hex(16)  # mitmweb wants one; we print the URL with it
        if args.inspect:
            proxy_argv += [
                "--set",
                f"web_password={web_token}",
                "--web-host",
                "127.0.0.1",
                "--web-port",
                str(args.web_port),
                "--set",
                "web_open_browser=false",
            ]
        stack.start(tool, proxy_argv)
        host = "127.0.0.1" if args.listen_host in ("0.0.0.0", "::") else args.listen_host
        base = f"http://{host}:{args.listen_port}"
        _wait_http(f"{base}/healthz", stack)
        net = config.proxy.networks[0]
        print(
            f"\nchainproxy is up: {base}/rpc/v1/{net}   (dashboard/API: {base}/)\n"
            + (
                f"mitmweb UI:  http://127.0.0.1:{args.web_port}/?token={web_token}\n"
                if args.inspect
                else ""
            )
            + f"try:\n  curl -s -X POST {base}/rpc/v1/{net} -H 'content-type: application/json' "
            '-d \'{"jsonrpc":"2.0","id":1,"method":"chain_getHeader","params":[]}\'\n'
            "Ctrl-C stops everything.\n",
            flush=True,
        )
        while not stopping:
            if (why := stack.dead_child()) is not None:
                print(f"chainproxy: {why}; stopping", file=sys.stderr)
                return 1
            time.sleep(0.2)
        return 0
    except RuntimeError as e:
        print(f"chainproxy: {e}; stopping", file=sys.stderr)
        return 1
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
