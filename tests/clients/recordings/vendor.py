"""Re-vendor the bittensor SDK's recorded finney traffic (see README.md here).

    python -m tests.clients.recordings.vendor BITTENSOR_GIT_DIR [COMMIT]

Reads ``tests/helpers/integration_websocket_data.py`` and the metadata
file at COMMIT (default HEAD) of a bittensor checkout (``git show``; the
recording is parsed with ``ast``, never imported) and writes the seeds in
``SEEDS``, verbatim but for the runtime calls in ``DROP``, to
``finney_recording.json`` and the v15 metadata answer to
``finney_metadata.json``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
SOURCE = "tests/helpers/integration_websocket_data.py"
# the metadata answer the SDK (11.3.0) uses: v15 (``Metadata_metadata_at_version``);
# the v14 one (``integration_websocket_metadata.txt``) is not vendored
METADATA = {"Metadata_metadata_at_version": "tests/helpers/integration_websocket_at_version.txt"}
# the recordings tests/clients/bt/replay_client.py reads from (one SDK test each);
# ``retry_archive`` could not be: it cycles through several answers to one request
SEEDS = (
    "metagraph",  # the replay node's head (block 6,852,690); subnet 1's lite neurons
    "get_balance",
    "get_netuids_for_hotkey",
    "is_hotkey_registered_on_subnet",
    "difficulty",
    "immunity_period",
    "max_weight_limit",
    "min_allowed_weights",
    "blocks_since_last_update",
)
# runtime calls the SDK 11.3.0 never makes, left out for size (840 kB)
DROP = ("SubnetInfoRuntimeApi_get_subnet_state", "SubnetInfoRuntimeApi_get_selective_mechagraph")


def show(git_dir: str, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", git_dir, "show", f"{commit}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def seeds_of(source: str, wanted: tuple[str, ...]) -> dict:
    """The ``WEBSOCKET_RESPONSES`` entries named in ``wanted``, as plain data."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == (
            "WEBSOCKET_RESPONSES"
        ):
            table = node.value
            break
    else:
        raise ValueError("no WEBSOCKET_RESPONSES in the source")
    assert isinstance(table, ast.Dict)
    found = {
        ast.literal_eval(k): ast.literal_eval(v)
        for k, v in zip(table.keys, table.values, strict=True)
        if k is not None and ast.literal_eval(k) in wanted
    }
    missing = set(wanted) - set(found)
    if missing:
        raise ValueError(f"not in the recording: {sorted(missing)}")
    return {seed: _trimmed(found[seed]) for seed in wanted}


def _trimmed(table: dict) -> dict:
    calls = table.get("state_call", {})
    kept = {p: r for p, r in calls.items() if not any(name in p for name in DROP)}
    return {**table, "state_call": kept} if calls else table


def main(git_dir: str, commit: str = "HEAD") -> None:
    commit = subprocess.run(
        ["git", "-C", git_dir, "rev-parse", commit], check=True, capture_output=True, text=True
    ).stdout.strip()
    seeds = seeds_of(show(git_dir, commit, SOURCE), SEEDS)
    doc = {"source": {"repo": "opentensor/bittensor", "commit": commit, "path": SOURCE}}
    (HERE / "finney_recording.json").write_text(json.dumps({**doc, "seeds": seeds}, indent=1))
    metadata = {name: show(git_dir, commit, path).strip() for name, path in METADATA.items()}
    (HERE / "finney_metadata.json").write_text(json.dumps({**doc, "results": metadata}))


if __name__ == "__main__":
    main(*sys.argv[1:])
