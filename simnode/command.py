"""The command line that starts a simulated node in a process of its own (the
launcher, the e2e harness and the benchmarks all start them this way)."""

from __future__ import annotations

import sys


def simnode_argv(
    port: int,
    *,
    name: str,
    seed: str,
    epoch: float,
    block_time: float,
    start_height: int,
    genesis: str | None = None,
    archive: bool = False,
    host: str = "127.0.0.1",
    upgrade_at: int | None = None,
    upgrade_spec: int | None = None,
    state_keep: int | None = None,
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "simnode",
        "--host",
        host,
        "--port",
        str(port),
        "--name",
        name,
        "--seed",
        seed,
        "--epoch",
        f"{epoch:.3f}",
        "--block-time",
        f"{block_time:g}",
        "--start-height",
        str(start_height),
    ]
    if genesis:
        argv += ["--genesis", genesis]
    if archive:
        argv.append("--archive")
    if upgrade_at is not None:
        argv += ["--upgrade-at", str(upgrade_at)]
    if upgrade_spec is not None:
        argv += ["--upgrade-spec", str(upgrade_spec)]
    if state_keep is not None:
        argv += ["--state-keep", str(state_keep)]
    return argv
