"""``python -m simnode``: run one simulated node until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from .chain import FINNEY_GENESIS
from .runtime import BASE_SPEC
from .server import SimNode


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m simnode",
        description="Simulated Substrate (subtensor) JSON-RPC node over HTTP.",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9944, help="0 picks a free port")
    p.add_argument("--name", default="sim", help="label shown in /_sim/state and logs")
    p.add_argument("--block-time", type=float, default=12.0, help="seconds per block")
    p.add_argument("--genesis", default=FINNEY_GENESIS, help="block 0 hash")
    p.add_argument("--archive", action="store_true", help="never prune state")
    p.add_argument(
        "--state-keep",
        type=int,
        default=None,
        metavar="K",
        help="keep the state of the last K blocks only (default 256; every block's "
        "with --archive): older state answers 'State already discarded' (the "
        "state_keep fault changes it at run time; a reset keeps this one)",
    )
    p.add_argument("--seed", default="finney", help="chain identity; other seed = fork")
    p.add_argument(
        "--epoch",
        type=float,
        default=None,
        help="unix time at which the chain is at --start-height (default: now); "
        "give replicas the same value so they agree on heights",
    )
    p.add_argument("--start-height", type=int, default=0)
    p.add_argument("--chain-name", default="Bittensor", help="system_chain answer")
    p.add_argument(
        "--upgrade-at",
        type=int,
        default=None,
        help="a runtime upgrade: blocks from this height on run --upgrade-spec "
        "(the upgrade_at fault; a reset keeps it)",
    )
    p.add_argument(
        "--upgrade-spec",
        type=int,
        default=BASE_SPEC + 1,
        help=f"the spec version after --upgrade-at (default {BASE_SPEC + 1}; before: {BASE_SPEC})",
    )
    return p


async def serve(args: argparse.Namespace) -> int:
    node = SimNode(
        host=args.host,
        port=args.port,
        name=args.name,
        seed=args.seed,
        genesis=args.genesis,
        block_time=args.block_time,
        epoch=args.epoch,
        start_height=args.start_height,
        archive=args.archive,
        chain_name=args.chain_name,
        upgrade_at=args.upgrade_at,
        upgrade_spec=args.upgrade_spec,
        state_keep=args.state_keep,
        # The "die" fault models a crashed process: no cleanup, non-zero status.
        on_die=lambda: os._exit(1),
    )
    # Handlers before the "listening" line: whoever reads it may signal at once.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await node.start()
    print(f"simnode {node.name} listening on {node.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await node.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(serve(args))
    except ValueError as exc:  # bad chain configuration or upgrade
        print(f"simnode: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
