"""What a WebSocket call costs chainproxy's own code, without mitmproxy: the
floor of the WebSocket path if the proxy read its client sockets itself.

    python bench/bench_ws_addon.py [--quick] [--json]

Each message goes through ``RpcPipeline.message`` (gate, every step) and
``message_body``, as ``addon/hooks/websocket.py``'s ``_answer`` runs it, on a
fake socket, in one process (the upstream a fake that answers at once, the
cache the on-disk edge cache). Measured, CPU time per message, median of
alternating rounds:

* ``hit``: ``chain_getHeader`` at a block hash, from the cache;
* ``hit, forward step sync``: the same with ``forward_pending`` wrapped so that
  a call with nothing left to forward returns None instead of a coroutine
  (the runner then finishes the run without ``_resume``): what that change in
  ``addon/steps/forward_pending.py`` would save;
* ``miss``: ``state_getStorage`` of a new key every call at a block hash, as
  scenario 15 sends it (the fake upstream; the answer is stored);
* ``frames``: one client frame parsed by wsproto (mitmproxy's own parser) and
  the answer's frame built: what a direct read would add per message.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import wsproto
import wsproto.events

from addon.cache.store import DiskCacheStore
from addon.hooks.pipeline import RpcPipeline
from addon.mitm.internals import text_frame
from addon.pipeline.reply import message_body
from addon.steps.forward_pending import forward_pending
from bench.bench_addon import PINNED, _stages
from bench.results import print_results
from bench.wsframe import ZERO_MASK, frame
from bench.wsload import body as wsload_body


class FakeSocket:
    """A client's socket as the pipeline sees it; answers are dropped."""

    def __init__(self, client: str) -> None:
        self.network = "finney"
        self.client = client
        self.tier = None
        self.address = client
        self.subscriptions: dict[str, str] = {}
        self.live = True
        self.sent = 0

    def send(self, body: bytes) -> None:
        self.sent += 1

    def changed(self) -> None:
        pass


def sync_when_nothing_pending(rpc: Any, rt: Any) -> Any:
    """``forward_pending`` as a plain function on a call answered from the cache."""
    if not rpc.pending():
        rpc.forwarded = []
        return None
    return forward_pending(rpc, rt)


# A running proxy's loop turns between socket reads, and idles while it waits
# on them; the cache's writer thread (``addon/cache/disk_io.py``) keeps up
# meanwhile, and its answers (the filter of keys on disk,
# ``addon/cache/disk_keys.py``) come back. A loop that never idled would starve
# the thread, and every miss would ask SQLite's index as no running proxy does
# (~60 µs of each miss's figure until 2026-11-29).
TURN_EVERY = 32  # messages between two loop turns (scenario 15's 32 in flight)


async def per_message(
    pipe: RpcPipeline, bodies: list[bytes], sock: FakeSocket, cache: DiskCacheStore
) -> float:
    gc.collect()
    start = time.process_time()
    for i, content in enumerate(bodies):
        rpc = await pipe.message(content, sock, sock)
        message_body(rpc)
        if i % TURN_EVERY == TURN_EVERY - 1:
            await asyncio.sleep(0)  # a loop turn: the flush timer may fire
            await cache.settled()  # idle while the writer writes what it was handed
    elapsed = time.process_time() - start
    assert rpc.reply is not None and "result" in rpc.reply.doc, rpc.reply
    return elapsed / len(bodies) * 1e6


def frames_cost(n: int, content: bytes, answer: bytes) -> float:
    """wsproto parsing one masked client frame, plus the answer's frame header."""
    conn = wsproto.Connection(wsproto.ConnectionType.SERVER)
    data = frame(content, mask=ZERO_MASK)
    gc.collect()
    start = time.process_time()
    for _ in range(n):
        conn.receive_data(data)
        for event in conn.events():
            assert isinstance(event, wsproto.events.TextMessage)
        b"".join((text_frame(answer), answer))
    return (time.process_time() - start) / n * 1e6


async def main_async(quick: bool) -> dict[str, float]:
    n, rounds = (1000, 3) if quick else (4000, 7)
    hit = wsload_body(0, 0.0, 0, ("chain_getHeader", [PINNED]))
    out: dict[str, list[float]] = {"hit": [], "hit_sync_forward": [], "miss": [], "frames": []}
    with tempfile.TemporaryDirectory(prefix="bench-ws-addon-") as tmp:
        stages, rt = _stages(Path(tmp))
        cache = rt.cache
        assert isinstance(cache, DiskCacheStore)
        pipe = next(s for s in stages if isinstance(s, RpcPipeline))
        saved = pipe.steps
        patched = tuple(sync_when_nothing_pending if s is forward_pending else s for s in saved)
        sock = FakeSocket("127.0.0.7")
        await per_message(pipe, [hit] * 200, sock, cache)  # the entry in the cache, warm
        for r in range(rounds):
            nonce = r + 1
            misses = [wsload_body(i, 1.0, nonce, ("x", []), at=PINNED) for i in range(n)]
            order = ("hit", "hit_sync_forward", "miss")
            for kind in order if r % 2 == 0 else order[::-1]:
                pipe.steps = patched if kind == "hit_sync_forward" else saved
                bodies = misses if kind == "miss" else [hit] * n
                out[kind].append(await per_message(pipe, bodies, sock, cache))
            pipe.steps = saved
            out["frames"].append(frames_cost(n * 5, hit, json.dumps({"result": 1}).encode()))
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true", help="one JSON line instead of text")
    args = ap.parse_args()
    res = asyncio.run(main_async(args.quick))
    print_results(res, args.json, lambda k, v: f"WebSocket {k}: {v:.1f} µs CPU per message")


if __name__ == "__main__":
    main()
