"""What a reload cannot change (``common/config/restart.py``): the keys a
stack keeps until it restarts, and a served network's last node-rpc endpoint."""

from __future__ import annotations

from typing import Any

from common.config import Config, parse_config
from common.config.restart import lost_network, restart_only


def _config(nodes: dict[str, int], **top: Any) -> Config:
    endpoints = [
        {"url": f"http://{net}.example:{9000 + i}", "provider": f"p{i}", "kind": "node-rpc",
         "network": net}
        for net, n in nodes.items()
        for i in range(n)
    ]  # fmt: skip
    doc = {"data_dir": "/tmp/chainproxy-restart-test", "registry": {"endpoints": endpoints}}
    return parse_config({**doc, **top}, env={})


def test_the_last_node_of_a_served_network_cannot_go_by_reload() -> None:
    running = _config({"finney": 2, "test": 1})
    assert restart_only(running, _config({"finney": 1, "test": 1})) is None
    problem = restart_only(running, _config({"finney": 2}))
    assert problem == (
        "registry.endpoints: a reload cannot leave test with no node-rpc endpoint (it has 1); "
        "restart the stack to serve it with none"
    )
    assert lost_network(running, _config({"finney": 2})) == problem
    # a network no longer served may go with its nodes
    assert restart_only(running, _config({"finney": 2}, proxy={"networks": ["finney"]})) is None
    # a network that had none may stay without
    assert restart_only(_config({"finney": 1}), _config({"finney": 1})) is None


def test_the_sidecar_and_data_dir_stay() -> None:
    running = _config({"finney": 1})
    moved = _config({"finney": 1}, sidecar={"port": 9999})
    assert restart_only(running, moved) == (
        "sidecar.port: a reload cannot change it (8081 -> 9999); restart the stack"
    )
    assert lost_network(running, moved) is None  # the sidecar's own check: nodes only
