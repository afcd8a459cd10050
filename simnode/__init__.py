"""Simulated Substrate (subtensor) JSON-RPC node for tests, benchmarks and demos.

Library use::

    async with SimNode(start_height=1000, block_time=12) as node:
        ...  # JSON-RPC over HTTP POST at node.url (any path)
        node.set_faults(latency_ms=200, lag=3)
        node.state()["calls"]

Command: ``python -m simnode --port 9944 --name sim-a`` (see ``--help``).

Faults and counters are also controllable over HTTP: ``POST /_sim/control`` (JSON
object of fault keys, see :class:`Faults`), ``POST /_sim/reset``, ``GET /_sim/state``;
``GET /_sim/arrivals`` is the node's log of each request's arrival, methods and
sender (``simnode.arrivals``).
"""

from .chain import FINNEY_GENESIS, PRUNING_DEPTH, Chain, ChainConfig
from .faults import Faults
from .rpc import Dispatcher, RpcError
from .server import SimNode

__all__ = [
    "FINNEY_GENESIS",
    "PRUNING_DEPTH",
    "Chain",
    "ChainConfig",
    "Dispatcher",
    "Faults",
    "RpcError",
    "SimNode",
]
