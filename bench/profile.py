"""``make profile``: where chainproxy's CPU goes under load, sampled by py-spy.

    python bench/profile.py [--path miss|hit|distinct|blockhash|ws-hit|ws-miss]
                            [--seconds 10] [--unpinned] [--lean] [--bare]
                            [--set NAME=VALUE] [--out DIR]

Starts the trivial upstream, the sidecar and chainproxy (or, with ``--bare``,
bare ``mitmdump --mode reverse``) on 127.0.0.1, drives the proxy with wrk at 32
connections and samples it with ``py-spy record`` meanwhile (``distinct``:
``state_getStorage`` of a new key every call, ``blockhash``: ``chain_getBlockHash``
of a new height, both over HTTP; ``ws-hit``/``ws-miss``: the hit or distinct
calls over 32 WebSockets; these four through ``bench/wsload.py``; the storage
reads at the head's hash, as scenario 15 sends them and head pinning would, so
their answers are cached and the profile shows the cache's share; with
``--unpinned`` without a hash, not cached). Writes the
collapsed stacks (``bench/out/<name>.txt``; a flame graph beside it when
``inferno-flamegraph`` is installed) and prints the
functions with the most time of their own and the share of each part of the
stack (mitmproxy's event dispatch, its HTTP layers, chainproxy's stages…).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.load import LoadResult, run_load
from bench.stack import BIN, REPO, Stack, http_json
from bench.trivial_upstream import START_HEIGHT
from bench.websocket import head_hash
from chainproxy.commands import add_set_option

# Buckets for "where did the time go", first match wins, tested against each
# frame of a stack from the leaf up (so a stage's own JSON parsing counts as
# the stage's), then the whole stack falls into "other".
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # chainproxy's replacement of mitmproxy's trigger_event is dispatch, not addon work
    (
        "mitmproxy event dispatch (addonmanager, hooks, addon/mitm/internals.py)",
        ("addonmanager.py", "hooks.py", "_trigger_event (addon/mitm/", "contextlib.py"),
    ),
    ("chainproxy addon (addon/*, common/*, chainproxy/*)", ("(addon/", "(common/", "(chainproxy/")),
    ("aiohttp client (chainproxy's upstream calls)", ("(aiohttp/",)),
    ("mitmproxy built-in addons", ("mitmproxy/addons/",)),
    ("HTTP/1 parsing and assembly (h11, mitmproxy.net.http)", ("net/http", "/h11/")),
    ("mitmproxy proxy layers and server", ("mitmproxy/proxy/",)),
    ("flow objects (mitmproxy.http, coretypes)", ("mitmproxy/http.py", "coretypes/")),
    ("asyncio event loop and sockets", ("asyncio/", "selectors.py", "socket.py")),
)


def _part(stack: str) -> str:
    frames = stack.split(";")
    for frame in reversed(frames):
        for name, needles in PARTS:
            if any(n in frame for n in needles):
                return name
    return "other"


_IDLE = ("_worker (concurrent/futures/thread.py:89)",)


def summarize(collapsed: Path, top: int = 25) -> str:
    """Self time per function and per part from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    parts: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        leaf = stack.split(";")[-1]
        if leaf.startswith(_IDLE):
            continue  # a pool thread waiting for work (py-spy counts it busy)
        count = int(n)
        total += count
        own[leaf] += count
        parts[_part(stack)] += count
    if not total:
        return "no samples (is py-spy allowed to ptrace? run as root or set ptrace_scope 0)"
    out = [f"{total} samples", "", "share of samples by part of the stack:"]
    for name, n in parts.most_common():
        out.append(f"  {100 * n / total:5.1f}%  {name}")
    out += ["", f"top {top} functions by own time:"]
    for name, n in own.most_common(top):
        out.append(f"  {100 * n / total:5.1f}%  {name}")
    return "\n".join(out)


WSLOAD_PATHS = {  # path -> (WebSocket?, share of distinct calls, kind of distinct call)
    "distinct": (False, 1.0, "storage"),
    "blockhash": (False, 1.0, "blockhash"),
    "ws-hit": (True, 0.0, "storage"),
    "ws-miss": (True, 1.0, "storage"),
}


def drive(
    path: str, target: str, body: bytes, seconds: float, sockets: int = 32, at: str | None = None
) -> LoadResult:
    """Load at 32 connections for ``seconds``: wrk/pyload for the fixed bodies,
    ``bench/wsload.py`` for distinct calls and WebSockets."""
    if path not in WSLOAD_PATHS:
        return run_load(target, body, connections=32, duration_s=seconds)
    from bench.load import parse_result

    ws, ratio, kind = WSLOAD_PATHS[path]
    doc = json.loads(body)
    argv = [
        sys.executable,
        str(REPO / "bench" / "wsload.py"),
        "--url",
        ("ws://" + target.split("://", 1)[1]) if ws else target,
        "--sockets",
        str(sockets if ws else 32),
        "--concurrency",
        "32",
        "--duration",
        str(seconds),
        "--hit",
        json.dumps([doc["method"], doc["params"]]),
        "--miss-ratio",
        str(ratio),
        "--miss-kind",
        kind,
        "--nonce",
        str(int(time.time() * 1000) & 0x7FFFFFFF),
        *(["--at", at] if at and kind == "storage" else []),
        *([] if ws else ["--http"]),
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    return parse_result(out.stdout, f"wsload failed:\n{out.stdout}\n{out.stderr}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", choices=("miss", "hit", *WSLOAD_PATHS), default="miss")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--sockets", type=int, default=32, help="ws-*: the 32 calls over N sockets")
    ap.add_argument(
        "--unpinned",
        action="store_true",
        help="distinct/ws-miss: storage reads without a block hash (not cached), instead of at "
        "the head's hash as scenario 15 and head pinning send them (cached: the disk's share)",
    )
    ap.add_argument("--lean", action="store_true", help="chainproxy in lean mode")
    ap.add_argument("--bare", action="store_true", help="bare mitmdump instead of chainproxy")
    add_set_option(ap, "chainproxy_fast_dispatch=false")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    args = ap.parse_args()
    pyspy = shutil.which("py-spy") or str(BIN / "py-spy")
    if not os.access(pyspy, os.X_OK):
        print("py-spy not found: pip install -e '.[bench]' (make bench-deps)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    cpus = sorted(os.sched_getaffinity(0))
    proxy_cpus = {cpus[-1]} if len(cpus) >= 2 else None
    if len(cpus) >= 2:
        os.sched_setaffinity(0, {cpus[0]})
    with tempfile.TemporaryDirectory(prefix="chainproxy-profile-") as tmp:
        st = Stack(Path(tmp))
        try:
            trivial = st.start_trivial(args.seconds + 120)
            if args.bare:
                proc, url = st.start_bare_mitmdump("bare", trivial, cpus=proxy_cpus)
            else:
                config, sidecar = st.write_config(
                    "trivial",
                    [trivial],
                    data_dir=Path(tmp) / "d",
                    proxy={"websocket": {"max_connections_per_client": 1_000}},
                )
                st.start_sidecar("sidecar", config, sidecar)
                sets = (*args.sets, *(("chainproxy_lean=true",) if args.lean else ()))
                proc, url = st.start_chainproxy(
                    "chainproxy", config, sidecar, sets=sets, cpus=proxy_cpus
                )
                time.sleep(3)  # the first routing snapshot
            body = b'{"jsonrpc":"2.0","id":0,"method":"chain_getHeader","params":[]}'
            if args.path in ("hit", "ws-hit"):
                h = http_json(
                    trivial,
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "chain_getBlockHash",
                        "params": [START_HEIGHT - 100],
                    },
                )["result"]
                body = json.dumps(
                    {"jsonrpc": "2.0", "id": 0, "method": "chain_getHeader", "params": [h]}
                ).encode()
            target = url + "/rpc/v1/finney"
            at = None if args.unpinned else head_hash(trivial)
            drive(args.path, target, body, 2, args.sockets, at)  # warm up
            name = "-".join(
                [
                    "bare" if args.bare else "lean" if args.lean else "chainproxy",
                    *(x.replace("=", "-") for x in args.sets),
                    args.path,
                    *([f"{args.sockets}sockets"] if args.path.startswith("ws-") else []),
                ]
            )
            raw = args.out / f"{name}.txt"
            svg = args.out / f"{name}.svg"
            result: dict[str, object] = {}
            load = threading.Thread(
                target=lambda: result.setdefault(
                    "load",
                    drive(args.path, target, body, args.seconds + 1, args.sockets, at),
                )
            )
            load.start()
            base = [pyspy, "record", "-p", str(proc.pid), "-d", str(int(args.seconds)), "-r", "250"]
            subprocess.run(
                [*base, "--format", "raw", "-o", str(raw)],
                check=True,
                capture_output=True,
                timeout=args.seconds + 60,
            )
            load.join()
            lr = result["load"]  # type: ignore[assignment]
            print(f"{name}: {lr.rps:,.0f} req/s under the profiler, errors {lr.errors} {lr.detail}")
            print(summarize(raw))
            # the flame graph from the same stacks: a second recording would differ
            flame = shutil.which("inferno-flamegraph")
            if flame:
                with raw.open("rb") as fi, svg.open("wb") as fo:
                    subprocess.run([flame], stdin=fi, stdout=fo, check=False)
            print(f"\ncollapsed stacks: {raw}" + (f"\nflame graph: {svg}" if flame else ""))
        finally:
            st.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
