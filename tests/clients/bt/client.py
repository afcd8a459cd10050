"""Run by tests/clients/test_subscriptions_bittensor.py with the Python of
``.venv-bt`` (``make bt-deps``): the bittensor SDK (PyPI 11.3.0) through the
proxy's WebSocket on chopsticks. Prints "@@ {json}" steps; "wants" asks the
test for blocks (it answers on stdin once they are made).

    python client.py WS_URL SOURCE_IP BLOCKS

chopsticks runs Rococo Asset Hub, not subtensor, and two things stop the SDK's
connect there; each is recorded as it happens, then worked around so that the
reads and the block waiting can run:

1. "v15": the SDK loads metadata v15 (``state_call
   Metadata_metadata_at_version``) and takes its v14 fallback only on
   Substrate's own error text; chopsticks answers "Function to start was not
   found." -> the fallback's needle is set to that text.
2. "symbols": ``connect()`` reads ``SubtensorModule.TokenSymbol`` (no such
   pallet here) unless its on-disk cache of token symbols is fresh -> the
   cache is seeded for the URL (in the test's own HOME).

Then: ``.block``, ``.finalized_block``, ``.spec_version`` (11.3.0 has no
``get_current_block()``: ``.block`` is its replacement), ``wait_for_block``
(head + 2), and the async client's ``blocks()`` stream for BLOCKS new blocks.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any

import bittensor as bt
import bittensor._transport.rpc as bt_rpc
import bittensor._transport.runtime as bt_runtime

CHOPSTICKS_NO_V15 = "Function to start was not found"
_stdin = threading.Semaphore(0)


def emit(doc: dict[str, Any]) -> None:
    print("@@ " + json.dumps(doc, default=str), flush=True)


def ask_blocks(count: int, why: str) -> None:
    emit({"step": "wants", "blocks": count, "why": why})
    if not _stdin.acquire(timeout=60):
        raise TimeoutError("the test made no blocks")


def _read_stdin() -> None:
    for _ in sys.stdin:
        _stdin.release()


def bind_source(ip: str) -> None:
    """The SDK's sockets leave from ``ip`` (the test's own rate-limit identity)."""
    connect = bt_rpc.ws_connect

    def bound(url: str, **kwargs: Any) -> Any:
        return connect(url, local_addr=(ip, 0), **kwargs)

    bt_rpc.ws_connect = bound


def attempt(name: str, url: str) -> bool:
    """One fresh blocking client's ``.block``: recorded, True when it worked."""
    sub = bt.Subtensor(url)
    try:
        emit({"step": name, "block": sub.block})
        return True
    except Exception as e:  # what the SDK raises is the finding
        emit({"step": name, "error": f"{type(e).__name__}: {e}"})
        return False
    finally:
        sub.close()


def blocking_reads(url: str) -> None:
    sub = bt.Subtensor(url)
    try:
        block = sub.block
        emit(
            {
                "step": "reads",
                "block": block,
                "finalized_block": sub.finalized_block,
                "spec_version": sub.spec_version,
                "has_get_current_block": hasattr(sub, "get_current_block"),
            }
        )
        waiter = threading.Thread(target=ask_blocks, args=(2, "wait_for_block"), daemon=True)
        waiter.start()
        header = sub.wait_for_block(block + 2, timeout=60)
        waiter.join(60)
        emit({"step": "wait_for_block", "target": block + 2, "header": header.number})
    finally:
        sub.close()


async def stream(url: str, blocks: int) -> None:
    """The async client's ``blocks()``: the first header, then BLOCKS new blocks."""
    seen: list[dict[str, Any]] = []
    async with bt.Subtensor(url) as client:
        async for header in client.blocks():
            seen.append({"number": header.number, "parentHash": header.parent_hash})
            if len(seen) == 1:
                loop = asyncio.get_running_loop()
                loop.run_in_executor(None, ask_blocks, blocks, "blocks()")
            if len(seen) > blocks:
                break
    emit({"step": "blocks", "heads": seen})


def main(url: str, blocks: int) -> None:
    threading.Thread(target=_read_stdin, daemon=True).start()
    emit({"step": "version", "bittensor": bt.__version__})
    if not attempt("as_is", url):
        bt_runtime._V15_MISSING_NEEDLE = CHOPSTICKS_NO_V15
        if not attempt("v15", url):
            bt.config.save_token_symbols(url, {0: "TAU"})
            attempt("symbols", url)
    try:
        blocking_reads(url)
    except Exception as e:  # report it and go on: the test says what failed
        emit({"step": "reads", "error": f"{type(e).__name__}: {e}"})
    try:
        asyncio.run(asyncio.wait_for(stream(url, blocks), 90))
    except Exception as e:
        emit({"step": "blocks", "error": f"{type(e).__name__}: {e}"})
    emit({"step": "done"})


if __name__ == "__main__":
    bind_source(sys.argv[2])
    main(sys.argv[1], int(sys.argv[3]))
