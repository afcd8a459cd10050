"""Run by tests/clients/test_subscriptions_asi.py with the Python of ``.venv-asi``:
async-substrate-interface following new heads through the proxy's WebSocket
while the test makes blocks. Prints "@@ {json}" lines; each "@@ … wants" line
asks the test for blocks (the test answers on stdin when they are made).

    python subs_client.py WS_URL SOURCE_IP BLOCKS

1. Its WebSocket manager (``Websocket``): ``chain_subscribeNewHeads``, the
   notifications of BLOCKS new blocks, ``chain_unsubscribeNewHeads``.
2. Its high-level API (``AsyncSubstrateInterface``): ``subscribe_block_headers``
   (BLOCKS new blocks), then ``wait_for_block`` (head + 2). That API loads the
   runtime with ``state_call Metadata_metadata_at_version`` first and falls back
   to metadata v14 only when the node answers Substrate's own text ("Exported
   method Metadata_metadata_at_version is not found"); chopsticks answers
   "Function to start was not found." instead, so the fallback is taken for
   that text too (step "v15" shows the node's answer, through the proxy).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any

from async_substrate_interface.async_substrate import AsyncSubstrateInterface, Websocket
from async_substrate_interface.errors import SubstrateRequestException
from client import bind_source

CHOPSTICKS_NO_V15 = "Function to start was not found"
_stdin_lines: asyncio.Queue[str] | None = None


def emit(doc: dict[str, Any]) -> None:
    print("@@ " + json.dumps(doc, default=str), flush=True)


async def ask_blocks(count: int, why: str) -> None:
    """Ask the test for ``count`` blocks and wait until it says they are made."""
    assert _stdin_lines is not None
    emit({"step": "wants", "blocks": count, "why": why})
    await _stdin_lines.get()


def _read_stdin(loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str]) -> None:
    """In a daemon thread: a blocked read must not hold the exit."""
    for line in sys.stdin:
        loop.call_soon_threadsafe(lines.put_nowait, line.strip())


async def manager(url: str, blocks: int) -> None:
    """The SDK's WebSocket manager, subscribing itself."""
    ws = Websocket(url, shutdown_timer=None)
    async with ws:
        call_id = await ws.send(
            {"jsonrpc": "2.0", "method": "chain_subscribeNewHeads", "params": []}
        )
        answer = await _wait(ws, call_id)
        sub_id = answer["result"]
        seen: list[dict[str, Any]] = []
        asked = False
        while len(seen) < blocks + 1:  # the current head, then the new blocks
            note = await _wait(ws, sub_id)
            seen.append({"header": note["params"]["result"], "sub": note["params"]["subscription"]})
            if not asked:
                asked = True
                await ask_blocks(blocks, "manager")
        await ws.unsubscribe(sub_id, method="chain_unsubscribeNewHeads")
        emit({"step": "manager", "subscription": sub_id, "heads": seen})
        # what the high-level API asks first, as it asks it (v15 = 0x0f000000)
        v15 = await ws.send(
            {
                "jsonrpc": "2.0",
                "method": "state_call",
                "params": ["Metadata_metadata_at_version", "0x0f000000"],
            }
        )
        emit({"step": "v15", "answer": await _wait(ws, v15)})
    await ws.shutdown()


async def _wait(ws: Websocket, item: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The next answer or notification for ``item`` (the client's API is polling)."""
    for _ in range(int(timeout_s / 0.01)):
        if (got := await ws.retrieve(item)) is not None:
            return got
        await asyncio.sleep(0.01)
    raise TimeoutError(f"nothing for {item} in {timeout_s:g}s")


async def high_level(url: str, blocks: int) -> None:
    allow_chopsticks_without_v15()  # before initialize(): it loads the runtime at once
    s = AsyncSubstrateInterface(url)
    await s.initialize()
    seen: list[dict[str, Any]] = []

    async def on_header(block: dict[str, Any]) -> Any:
        seen.append({k: block["header"][k] for k in ("number", "parentHash")})
        if len(seen) == 1:
            asyncio.get_running_loop().create_task(ask_blocks(blocks, "subscribe_block_headers"))
        return seen[-1]["number"] if len(seen) > blocks else None

    last = await s.subscribe_block_headers(on_header)
    emit({"step": "subscribe_block_headers", "heads": seen, "returned": last})

    target = await s.get_block_number(None) + 2
    task = await s.wait_for_block(target, _number, task_return=True)
    await ask_blocks(2, "wait_for_block")
    reached = await asyncio.wait_for(task, 30)
    emit({"step": "wait_for_block", "target": target, "reached": reached})
    await s.close()


async def _number(block: dict[str, Any]) -> int:
    return block["header"]["number"]


def allow_chopsticks_without_v15() -> None:
    """Take the v14 fallback for chopsticks' answer too (see the module docstring)."""
    original = AsyncSubstrateInterface._load_registry_at_block

    async def load(self: Any, block_hash: Any, runtime_config: Any = None) -> Any:
        try:
            return await original(self, block_hash, runtime_config)
        except SubstrateRequestException as e:
            if CHOPSTICKS_NO_V15 in str(e):
                return None
            raise

    AsyncSubstrateInterface._load_registry_at_block = load  # type: ignore[method-assign]


async def main(url: str, blocks: int) -> None:
    global _stdin_lines
    _stdin_lines = asyncio.Queue()
    loop = asyncio.get_running_loop()
    threading.Thread(target=_read_stdin, args=(loop, _stdin_lines), daemon=True).start()
    for step in (manager, high_level):
        try:
            await asyncio.wait_for(step(url, blocks), 90)
        except Exception as e:  # report it and go on: the test says what failed
            emit({"step": step.__name__, "error": f"{type(e).__name__}: {e}"})
    emit({"step": "done"})


if __name__ == "__main__":
    bind_source(sys.argv[2])
    asyncio.run(main(sys.argv[1], int(sys.argv[3])))
    sys.exit(0)
