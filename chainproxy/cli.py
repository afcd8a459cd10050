"""The ``chainproxy`` command (pyproject ``[project.scripts]``)::

    chainproxy run     [--config F] [--workers N] [--listen-host H] [--listen-port P] [--set K=V]
    chainproxy demo    [--workers N] ...   offline, simulated nodes (configs/demo.yaml)
    chainproxy inspect [--config F] ...    under mitmweb: every flow in a browser UI
    chainproxy check-config FILE           exit 0 and a summary, or 2 and "key: problem"
    chainproxy reload  [--config F] [--pid PID] [--timeout S]
                                           the running launcher re-reads F (validated
                                           first); workers replaced one at a time
    chainproxy version

``run``/``demo``/``inspect`` are ``python -m chainproxy.launch`` with the right
flags (the make targets call them)."""

from __future__ import annotations

import argparse
import platform
import sys
from importlib import metadata

from chainproxy import launch
from chainproxy.commands import tcp_port
from chainproxy.reload_command import DEFAULT_TIMEOUT_S, reload_command
from chainproxy.summary import describe
from common.config import ConfigError, load_config

DEMO_CONFIG = "configs/demo.yaml"

QUIET_FLOWS = "flow_detail=0"  # what `run` gives mitmdump unless told otherwise


def _stack_options(ap: argparse.ArgumentParser, default_config: str) -> None:
    ap.add_argument("--config", default=default_config, help=f"(default {default_config})")
    ap.add_argument("--workers", type=int, default=1, help="proxy processes behind one address")
    ap.add_argument("--listen-host", default=None)
    ap.add_argument("--listen-port", type=tcp_port, default=None)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="NAME=VALUE")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="chainproxy", description="Read-only JSON-RPC proxy for the Bittensor chain."
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _stack_options(
        sub.add_parser("run", help="proxy + sidecar on the config's endpoints"),
        "configs/finney.yaml",
    )
    _stack_options(sub.add_parser("demo", help="offline, with simulated nodes"), DEMO_CONFIG)
    _stack_options(sub.add_parser("inspect", help="like run, under mitmweb"), "configs/finney.yaml")
    check = sub.add_parser("check-config", help="validate a config file, like nginx -t")
    check.add_argument("file")
    reload = sub.add_parser(
        "reload", help="the running stack re-reads its config (like SIGHUP to `chainproxy run`)"
    )
    reload.add_argument("--config", default="configs/finney.yaml", help="the running one's")
    reload.add_argument("--pid", type=int, default=None, help="the launcher's (default: pid file)")
    reload.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S")
    sub.add_parser("version", help="chainproxy, mitmproxy and Python versions")
    return ap


def _launch_argv(args: argparse.Namespace) -> list[str]:
    argv = ["--config", args.config, "--workers", str(args.workers)]
    if args.listen_host is not None:
        argv += ["--listen-host", args.listen_host]
    if args.listen_port is not None:
        argv += ["--listen-port", str(args.listen_port)]
    if args.command == "demo" or (args.command == "inspect" and "demo" in args.config):
        argv.append("--simulate")
    if args.command == "inspect":
        argv.append("--inspect")
    sets = list(args.sets)
    told = any(s.startswith("flow_detail=") for s in sets)
    if args.command == "run" and not told:
        # production: no line per flow from mitmproxy (the addon's own lines stay;
        # the access log is proxy.access_log), as the systemd units run it and
        # the benchmarks measure it; the demo and mitmweb keep theirs
        sets.insert(0, QUIET_FLOWS)
    for s in sets:
        argv += ["--set", s]
    return argv


def version() -> str:
    def v(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return (
        f"chainproxy {v('chainproxy')} (mitmproxy {v('mitmproxy')}, aiohttp {v('aiohttp')}, "
        f"Python {platform.python_version()})"
    )


def check_config(path: str) -> int:
    try:
        config = load_config(path)
    except ConfigError as e:
        print(f"chainproxy: {path}: {e}", file=sys.stderr)
        return 2
    print(describe(config, path))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "version":
        print(version())
        return 0
    if args.command == "check-config":
        return check_config(args.file)
    if args.command == "reload":
        return reload_command(args.config, args.pid, args.timeout)
    return launch.main(_launch_argv(args))


if __name__ == "__main__":
    sys.exit(main())
