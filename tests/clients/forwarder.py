"""A TCP forwarder: one "endpoint front" for a chopsticks node.

``python -m tests.clients.forwarder --listen-port P --to 127.0.0.1:Q`` accepts
connections on 127.0.0.1:P and pipes each, byte for byte, to Q. Two forwarders
in front of one chopsticks node are two endpoints serving one chain; stopping
a forwarder (SIGTERM) is an endpoint going away: its listening socket closes
and its open connections are closed, like a node that died. ``--delay-ms``
holds every chunk sent upstream that long: a slower endpoint, which the
proxy's latency-aware choice then uses only as the backup.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal


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


async def serve(listen_port: int, host: str, port: int, delay_s: float = 0.0) -> None:
    conns: set[asyncio.Task[None]] = set()

    async def handle(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            u_reader, u_writer = await asyncio.open_connection(host, port)
        except OSError:
            c_writer.close()
            return
        pipes = [
            asyncio.create_task(_pipe(c_reader, u_writer, delay_s)),
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
    args = ap.parse_args()
    host, _, port = args.to.rpartition(":")
    asyncio.run(serve(args.listen_port, host, int(port), args.delay_ms / 1000))


if __name__ == "__main__":
    main()
