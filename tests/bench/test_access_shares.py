"""bench/access_shares.py: a call's time split from the access log's lines."""

from __future__ import annotations

import json
from pathlib import Path

from bench.access_shares import read_shares


def _line(client: str, method: str, latency: float, upstream: int | None, ok: bool = True) -> str:
    return json.dumps(
        {
            "client": client,
            "method": method,
            "latency_ms": latency,
            "upstream_ms": upstream,
            "outcome": "ok" if ok else "error",
        }
    )


def test_the_light_clients_calls_split_into_node_and_proxy(tmp_path: Path) -> None:
    log = tmp_path / "access.jsonl"
    lines = [
        _line("127.0.61.2", "state_getStorage", 12.5, 10),
        _line("127.0.61.3", "chain_getHeader", 0.4, None),  # a hit: no node asked
        _line("127.0.61.100", "state_call", 300.0, 290),  # a heavy client's
        _line("127.0.61.2", "state_getStorage", 5.0, 9, ok=False),
        '{"client": "127.0.61.2", "meth',  # cut by a write under way
    ]
    log.write_text("\n".join(lines))
    s = read_shares(log, {"127.0.61.2", "127.0.61.3"})
    assert s.proxy_ms == [12.5, 0.4]
    assert s.upstream_ms == [10.0, 0.0]
    assert s.own_ms == [2.5, 0.4]
    only = read_shares(log, {"127.0.61.2", "127.0.61.3"}, {"state_getStorage"})
    assert only.proxy_ms == [12.5]
    assert read_shares(tmp_path / "none.jsonl", {"x"}).proxy_ms == []
