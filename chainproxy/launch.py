"""Run the whole stack in the foreground: ``make run`` / ``make demo`` / ``make inspect``.

Starts (for ``--simulate``) a simulated node for every loopback ``node-rpc``
endpoint of the config, then the sidecar, then mitmdump (or mitmweb) with the
addon; prints the proxy URL and a curl that works; and on Ctrl-C / SIGTERM
stops every child (no orphans: each child also gets SIGTERM from the kernel
if this process is killed outright). A child that dies is started again
(``chainproxy/keepers.py``), but HAProxy, whose death stops the stack; a
simulated node is not (the proxy fails over, as from a real node). SIGHUP or
``chainproxy reload`` reloads the config, workers one at a time
(``chainproxy/reload.py``).
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from chainproxy.commands import add_set_option, proxy_argv, sidecar_argv, tcp_port
from chainproxy.keepers import Keeper, file_check, say
from chainproxy.reload import (
    Reloader,
    ReloadRequest,
    other_launcher,
    reload_hint,
    remove_pid_file,
    write_pid_file,
)
from chainproxy.rolling import WorkerPool
from chainproxy.supervisor import (
    Child,
    StartError,
    StopRequest,
    Supervisor,
    reserve,
    wait_http,
)
from chainproxy.worker_stack import keep_workers, start_workers, worker_tools
from common.config import Config, ConfigError, load_config
from simnode.command import simnode_argv

DEMO_BLOCK_S = 4  # simulated nodes make a block every few seconds: the demo shows live heads


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
            block_time=DEMO_BLOCK_S,
            start_height=4_000_000,
            genesis=config.networks[e.network].genesis,
            archive=e.archive,
        )
        argvs.append(argv)
    return argvs


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m chainproxy.launch", description=__doc__)
    ap.add_argument("--config", default="configs/finney.yaml")
    ap.add_argument("--listen-host", default=os.environ.get("PROXY_HOST", "127.0.0.1"))
    ap.add_argument(
        "--listen-port", type=tcp_port, default=int(os.environ.get("PROXY_PORT", "8080"))
    )
    ap.add_argument("--simulate", action="store_true", help="start simulated upstream nodes")
    ap.add_argument("--inspect", action="store_true", help="mitmweb instead of mitmdump")
    ap.add_argument("--web-port", type=int, default=8082)
    ap.add_argument(
        "--workers", type=int, default=1, help="proxy processes behind one address (HAProxy)"
    )
    add_set_option(ap, "chainproxy_lean=true")
    return ap


def _banner(base: str, network: str, web_ui: str | None, config_path: str) -> str:
    return (
        f"\nchainproxy is up: {base}/rpc/v1/{network}   (dashboard/API: {base}/)\n"
        + (f"mitmweb UI:  {web_ui}\n" if web_ui else "")
        + f"try:\n  curl -s -X POST {base}/rpc/v1/{network} -H 'content-type: application/json' "
        '-d \'{"jsonrpc":"2.0","id":1,"method":"chain_getHeader","params":[]}\'\n'
        f"  live heads over WebSocket: ws://{base.split('://', 1)[1]}/rpc/v1/{network} "
        '(send {"jsonrpc":"2.0","id":1,"method":"chain_subscribeNewHeads","params":[]})\n'
        "Ctrl-C stops everything; `"
        + reload_hint(config_path)
        + "` (or SIGHUP to this process) re-reads the config.\n"
    )


def _inspect_options(web_port: int) -> tuple[str, list[str]]:
    """mitmweb's UI address (with its token) and the options that set it up."""
    token = secrets.token_hex(16)  # mitmweb wants one; we print the URL with it
    return f"http://127.0.0.1:{web_port}/?token={token}", [
        "--set",
        f"web_password={token}",
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(web_port),
        "--set",
        "web_open_browser=false",
        # WebSocket answers and notifications through mitmproxy: mitmweb shows them
        "--set",
        "chainproxy_ws_direct=false",
        # every HTTP request through mitmproxy too, none read directly
        "--set",
        "chainproxy_http_direct=false",
    ]


def _tell(reloader: Reloader | None, role: str, child: Child) -> None:
    """A child started again: the one a reload signals from now on."""
    if reloader is not None:
        setattr(reloader, role, child)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if bad := [s for s in args.sets if "=" not in s.strip("=")]:
        print(f"chainproxy: --set wants NAME=VALUE, got {bad[0]!r}", file=sys.stderr)
        return 2

    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"chainproxy: {e}", file=sys.stderr)
        return 2

    if args.workers < 1 or args.workers > 64:
        print(f"chainproxy: --workers must be 1..64, got {args.workers}", file=sys.stderr)
        return 2
    if args.workers > 1 and args.inspect:
        print("chainproxy: --inspect runs one proxy (mitmweb): drop --workers", file=sys.stderr)
        return 2
    tools = worker_tools(config) if args.workers > 1 else {}
    if isinstance(tools, str):
        print(f"chainproxy: {tools}", file=sys.stderr)
        return 2

    bindir = Path(sys.executable).parent
    tool = "mitmweb" if args.inspect else "mitmdump"
    mitm = shutil.which(tool, path=str(bindir)) or shutil.which(tool)
    if mitm is None:
        print(f"chainproxy: {tool} not found (run `make` to install)", file=sys.stderr)
        return 2

    # Ports the children bind later than the workers' and Redis's picks are made
    # (HAProxy binds the listen port last): never one of those picks.
    local = [urlsplit(e.url) for e in config.endpoints]
    reserve(
        args.listen_port,
        args.web_port,
        config.sidecar.port,
        *(u.port for u in local if u.port and u.hostname in ("127.0.0.1", "localhost")),
    )
    # The children share our terminal; the whole stack stops within drain_s.
    stack = Supervisor(grace_s=config.proxy.drain_s + 2.0)
    stop = StopRequest()
    hup = ReloadRequest()  # before the pid file and the children: a SIGHUP never ends us
    if (other := other_launcher(config)) is not None:
        print(
            f"chainproxy: a stack runs with data_dir {config.data_dir} already (launcher pid "
            f"{other}): stop it first, or give this one another data_dir",
            file=sys.stderr,
        )
        return 2
    try:
        pid_file = write_pid_file(config, args.config)
    except OSError as e:
        print(f"chainproxy: data_dir: cannot use {config.data_dir}: {e.strerror}", file=sys.stderr)
        return 2
    reloader: Reloader | None = None
    pool: WorkerPool | None = None
    try:
        if args.simulate:
            for node in _simulated_nodes(config):
                stack.start("simnode", node)
        keeper = Keeper(stack)
        check = file_check(args.config, lambda: reloader.config if reloader is not None else config)

        def start_sidecar() -> Child:
            return stack.start("sidecar", sidecar_argv(args.config))

        sidecar = start_sidecar()
        wait_http(f"{config.sidecar.url}/healthz", sidecar, also=stack.children)
        keeper.keep_one(
            "sidecar",
            sidecar,
            start_sidecar,
            "RPC goes on",
            check=check,
            on_start=lambda child: _tell(reloader, "sidecar", child),
        )
        proxy = proxy_argv(
            mitm,
            args.config,
            config.sidecar.url,
            host=args.listen_host,
            port=args.listen_port,
            sets=args.sets,
        )
        web_ui = None
        single = None
        if args.workers > 1:
            assert isinstance(tools, dict)
            pool = start_workers(stack, args, config, mitm, tools)
            assert pool.balancer_child is not None
            proc = pool.balancer_child
            keep_workers(keeper, pool, check)
        else:
            if args.inspect:
                web_ui, extra = _inspect_options(args.web_port)
                proxy += extra

            def start_proxy() -> Child:
                return stack.start(tool, proxy)

            proc = single = start_proxy()
            keeper.keep_one(
                "proxy",
                single,
                start_proxy,
                "calls are refused until it is back",
                check=check,
                on_start=lambda child: _tell(reloader, "proxy", child),
            )
        host = "127.0.0.1" if args.listen_host in ("0.0.0.0", "::") else args.listen_host
        base = f"http://{host}:{args.listen_port}"
        wait_http(f"{base}/healthz", proc, also=stack.children)
        reloader = Reloader(
            args.config,
            config,
            sidecar,
            single,
            pool,
            lambda: stop.requested,
            proxy_url=f"{base}/rpc/healthz",
        )
        print(_banner(base, config.proxy.networks[0], web_ui, args.config), flush=True)

        def tick() -> None:
            if hup.requested and reloader is not None:
                hup.requested = False  # one more SIGHUP meanwhile: one more reload after
                reloader.run()
            keeper.tick()

        while (dead := stack.run_until_stopped(stop, tick)) is not None:
            if dead.name == "simnode":  # as a real node's death: the proxy fails over
                stack.forget(dead)
                say(f"{dead.exit_reason()}; the proxy fails over to the other nodes")
                continue
            if not keeper.died(dead):  # kept children are started again (keepers.py)
                print(f"chainproxy: {dead.exit_reason()}; stopping", file=sys.stderr)
                return 1
        return 0
    except StartError as e:
        print(f"chainproxy: {e}; stopping", file=sys.stderr)
        return 1
    finally:
        if pool is not None:  # the workers drain first, behind a HAProxy no longer listening
            running = reloader.config if reloader is not None else config
            pool.stop(running.proxy.drain_s)
        stack.stop_all()
        if reloader is not None:
            reloader.close()
        remove_pid_file(pid_file)


if __name__ == "__main__":
    sys.exit(main())
