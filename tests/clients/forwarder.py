"""A TCP forwarder: one "endpoint front" for a chopsticks node.

``python -m tests.clients.forwarder --listen-port P --to 127.0.0.1:Q`` accepts
connections on 127.0.0.1:P and pipes each, byte for byte, to Q. Two forwarders
in front of one chopsticks node are two endpoints serving one chain; stopping
a forwarder (SIGTERM) is an endpoint going away: its listening socket closes
and its open connections are closed, like a node that died. ``--delay-ms``
holds every chunk sent upstream that long: a slower endpoint, which the
proxy's latency-aware choice then uses only as the backup. ``--count``
counts the JSON-RPC calls passing the front (``tests/clients/counting.py``:
HTTP bodies and WebSocket messages, a batch per call; ``GET /_front/counts``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

from tests.clients.counting import CallCounts, count_http


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float = 0.0
) -> None:
    try:
        while data := await reader.read(65536):
            if delay_s:
                await asyncio.sleep(delay_s)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _count_pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    client: asyncio.StreamWriter,
    counts: CallCounts,
    delay_s: float,
) -> None:
    """Like ``_pipe``, but request by request (WebSocket: frame by frame), counted."""

    async def send(data: bytes) -> None:
        if delay_s:
            await asyncio.sleep(delay_s)
        writer.write(data)
        await writer.drain()

    async def reply(data: bytes) -> None:
        client.write(data)
        await client.drain()

    try:
        await count_http(reader, send, reply, counts)
    except (ConnectionError, OSError, ValueError):
        pass  # a broken request ends the connection, as a node would
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def serve(
    listen_port: int, host: str, port: int, delay_s: float = 0.0, count: bool = False
) -> None:
    conns: set[asyncio.Task[None]] = set()
    counts = CallCounts() if count else None

    async def handle(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            u_reader, u_writer = await asyncio.open_connection(host, port)
        except OSError:
            c_writer.close()
            return
        upstream = (
            _pipe(c_reader, u_writer, delay_s)
            if counts is None
            else _count_pipe(c_reader, u_writer, c_writer, counts, delay_s)
        )
        pipes = [
            asyncio.create_task(upstream),
            asyncio.create_task(_pipe(u_reader, c_writer)),
        ]
        conns.update(pipes)
        try:
            await asyncio.gather(*pipes)
        finally:
            conns.difference_update(pipes)

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port, reuse_address=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"forwarding 127.0.0.1:{listen_port} -> {host}:{port}", flush=True)
    await stop.wait()
    server.close()  # not ``async with``: its exit would wait for open connections
    for task in list(conns):
        task.cancel()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.clients.forwarder")
    ap.add_argument("--listen-port", type=int, required=True)
    ap.add_argument("--to", required=True, help="HOST:PORT")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="hold each upstream chunk")
    ap.add_argument("--count", action="store_true", help="count the JSON-RPC calls passing")
    args = ap.parse_args()
    host, _, port = args.to.rpartition(":")
    asyncio.run(serve(args.listen_port, host, int(port), args.delay_ms / 1000, args.count))


if __name__ == "__main__":
    main()
