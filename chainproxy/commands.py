"""The command lines of the stack's own processes, built in one place: the
launcher, the e2e harness and the benchmarks start the sidecar and the proxy
alike (``simnode.command`` does the same for a simulated node)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def sidecar_argv(config: str | Path) -> list[str]:
    return [sys.executable, "-m", "sidecar", "--config", str(config)]


def reverse_proxy_argv(
    tool: str | Path,
    target: str,
    *,
    port: int,
    host: str = "127.0.0.1",
    script: Path | None = None,
    sets: Sequence[str] = (),
    quiet: bool = False,
) -> list[str]:
    """mitmdump (or mitmweb) as a reverse proxy to ``target``; ``script``: an
    addon to load; ``sets``: ``--set NAME=VALUE`` options; ``quiet``: ``-q``."""
    argv = [str(tool)]
    if quiet:
        argv.append("-q")
    if script is not None:
        argv += ["-s", str(script)]
    argv += ["--mode", f"reverse:{target}", "--listen-host", host, "--listen-port", str(port)]
    for option in sets:
        argv += ["--set", option]
    return argv


def proxy_argv(
    tool: str | Path,
    config: str | Path,
    sidecar_url: str,
    *,
    port: int,
    host: str = "127.0.0.1",
    sets: Sequence[str] = (),
    quiet: bool = False,
    tree: Path = REPO,
) -> list[str]:
    """chainproxy: mitmdump with the addon of ``tree`` (this checkout, or another
    one whose addon to run), reading ``config``; paths that are not RPC go to
    the sidecar."""
    return reverse_proxy_argv(
        tool,
        sidecar_url,
        port=port,
        host=host,
        script=tree / "addon" / "rpcproxy.py",
        sets=(f"chainproxy_config={config}", *sets),
        quiet=quiet,
    )


def add_set_option(ap: argparse.ArgumentParser, example: str) -> None:
    """``--set NAME=VALUE``, repeatable: mitmproxy options for the proxy, in ``sets``."""
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"a mitmproxy option for the proxy, e.g. {example} (repeatable)",
    )


def tcp_port(text: str) -> int:
    """An argparse type: a TCP port, 1-65535 (argparse answers anything else
    with its one usage line and exit 2)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, got {n}")
    return n
