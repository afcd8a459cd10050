"""The ``python -m simnode`` command, run as a real subprocess."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

LINE_PREFIX = "simnode "


@asynccontextmanager
async def simnode_process(*args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "simnode",
        "--port",
        "0",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode().strip()
        assert line.startswith(LINE_PREFIX) and " listening on http://127.0.0.1:" in line, line
        yield proc, line.rsplit(" ", 1)[1]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_cli_serves_and_exits_cleanly_on_sigterm() -> None:
    epoch = "1700000000"
    async with (
        simnode_process(
            "--name",
            "cli-a",
            "--epoch",
            epoch,
            "--block-time",
            "12",
            "--start-height",
            "1000",
            "--chain-name",
            "Simnet",
        ) as (proc, url),
        aiohttp.ClientSession() as s,
    ):
        assert url.startswith("http://127.0.0.1:")
        body = [
            {"jsonrpc": "2.0", "id": 1, "method": "system_chain"},
            {"jsonrpc": "2.0", "id": 2, "method": "chain_getBlockHash", "params": [1]},
        ]
        async with s.post(url, json=body) as r:
            out = await r.json()
        assert out[0]["result"] == "Simnet"
        from simnode.chain import Chain, ChainConfig

        replica = Chain(ChainConfig(seed="finney", start_height=1000, epoch=float(epoch)))
        assert out[1]["result"] == replica.block_hash(1)  # the same chain from the same flags
        async with s.get(url + "/_sim/state") as r:
            state = await r.json()
        assert state["name"] == "cli-a"
        assert state["best"] > 1000  # epoch is years ago
        assert state["requests"] == 1
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0


async def test_cli_sigint_and_die() -> None:
    async with simnode_process("--archive") as (proc, _url):
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    async with simnode_process() as (proc, url), aiohttp.ClientSession() as s:
        async with s.post(url + "/_sim/control", json={"die": True}) as r:
            assert (await r.json())["die"] is True
        assert await asyncio.wait_for(proc.wait(), 10) == 1
