"""Run by tests/clients/test_sdk_replay.py with the Python of ``.venv-bt``
(``make bt-deps``): the bittensor SDK's reads that the replay node
(``tests/clients/replay_node.py``, finney traffic the SDK recorded for its own
tests) can answer. Prints one line, ``@@ {json}``: each read's result as plain
data, or its error.

    python replay_client.py WS_URL [SOURCE_IP]

Each read is pinned to the block its recording was made at (the head reads
are at the replay node's head, block 6,852,690). The SDK's own tests expect
two of these values: ``netuids_for_hotkey`` [14] and
``blocks_since_last_update`` 4,009,702.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from typing import Any

import bittensor as bt
from bittensor._transport.codec import ss58_encode

HOTKEY = "5Cf4LPRv6tiyuFsfLRQaFYEEn3zJRGi4bAE9DwbbKmbCSHpV"  # the SDK tests' hotkey
# the coldkey of the SDK's get_balance recording (its System.Account key's account id)
COLDKEY = ss58_encode(
    bytes.fromhex("1257de87a71abb164403f7cb9ea65d0721f8bb89d8bd85754deceedd91e86053")
)


def plain(value: Any) -> Any:
    """A result as JSON data: balances in rao, dataclasses as dicts."""
    if isinstance(value, bt.Balance):
        return {"rao": value.rao}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def reads(sub: Any) -> dict[str, Callable[[], Any]]:
    hp = sub.hyperparameters
    return {
        "block": lambda: sub.block,
        "finalized_block": lambda: sub.finalized_block,
        "spec_version": lambda: sub.spec_version,
        "balance": lambda: sub.balances.balance(coldkey_ss58=COLDKEY, block=3264158),
        "netuids_for_hotkey": lambda: sub.neurons.netuids_for_hotkey(HOTKEY, block=6522130),
        "uid": lambda: sub.neurons.uid(HOTKEY, 14, block=6522189),
        "difficulty": lambda: hp.difficulty(23, block=3264161),
        "immunity_period": lambda: hp.immunity_period(23, block=3264149),
        "max_weight_limit": lambda: hp.max_weight_limit(23, block=3264152),
        "min_allowed_weights": lambda: hp.min_allowed_weights(23, block=3264152),
        "blocks_since_last_update": lambda: sub.epochs.blocks_since_last_update(
            1, 0, block=6553223
        ),
        # NeuronInfoRuntimeApi_get_neurons_lite for 1,024 neurons (~250 kB answer)
        "neurons_lite": lambda: sub.neurons.neurons(1, block=6852690),
        "neurons_lite_head": lambda: sub.neurons.neurons(1),
    }


def bind_source(ip: str) -> None:
    """The SDK's sockets leave from ``ip`` (the test's own rate-limit identity)."""
    import bittensor._transport.rpc as bt_rpc

    connect = bt_rpc.ws_connect

    def bound(url: str, **kwargs: Any) -> Any:
        return connect(url, local_addr=(ip, 0), **kwargs)

    bt_rpc.ws_connect = bound


def main(url: str) -> None:
    sub = bt.Subtensor(url)
    results: dict[str, Any] = {}
    try:
        for name, read in reads(sub).items():
            try:
                results[name] = {"value": plain(read())}
            except Exception as e:  # what the SDK raises is the finding
                results[name] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        sub.close()
    print("@@ " + json.dumps({"bittensor": bt.__version__, "results": results}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 2:
        bind_source(sys.argv[2])
    main(sys.argv[1])
