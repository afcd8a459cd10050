"""Request ids and the access log: a sane client id is kept, anything else
replaced; one JSON line per call item with the id the client saw, the
client's address only as configured and never a key; a full disk or a
writer that falls behind drops lines (counted), never calls."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from addon.reporting.access_log import MAX_QUEUED, AccessLog, client_field
from addon.rpc.request_ids import request_id_of
from common.config import parse_config
from common.config.errors import ConfigError
from tests.addon.helpers import body, call, make, rpc_flow, run


def test_a_sane_client_id_is_kept_and_anything_else_replaced() -> None:
    assert request_id_of("trace-01:ab.CD_9") == "trace-01:ab.CD_9"
    for bad in (None, "", "has space", "x" * 129, "inj\nected", "é"):
        made = request_id_of(bad)
        assert made != bad and len(made) == 16


def test_client_addresses_as_configured() -> None:
    salt = b"s" * 16
    assert client_field("203.0.113.77", "full", salt) == "203.0.113.77"
    assert client_field("203.0.113.77", "truncated", salt) == "203.0.113.0/24"
    assert client_field("2001:db8:1:2::5", "truncated", salt) == "2001:db8:1::/48"
    hashed = client_field("203.0.113.77", "hashed", salt)
    assert hashed == client_field("203.0.113.77", "hashed", salt) and "203" not in hashed


def _lines(path: Path, n: int, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            lines = path.read_text().splitlines()
            if len(lines) >= n:
                return [json.loads(x) for x in lines]
        time.sleep(0.02)
    raise AssertionError(f"fewer than {n} lines in {path}")


async def test_one_line_per_call_item_with_the_id_the_client_saw(tmp_path: Path) -> None:
    log = tmp_path / "access.jsonl"
    stages, _, rt = make(access_log=str(log), access_log_client="full")
    try:
        f = rpc_flow([call("system_health", id_=1), call("chain_getHeader", id_=2)])
        f.request.headers["X-Request-Id"] = "complaint-42"
        await run(stages, f)
        assert f.response.headers["X-Request-Id"] == "complaint-42"
        assert "#complaint-42" in f.comment
        g = rpc_flow(call("author_submitExtrinsic", ["0x00"]))  # refused: logged too
        await run(stages, g)
        made = g.response.headers["X-Request-Id"]
        # a batch whose write is refused in place: its line names no node
        h = rpc_flow([call("author_submitExtrinsic", ["0x00"], id_=7), call("system_health")])
        await run(stages, h)
        lines = _lines(log, 5)
    finally:
        assert rt.access_log is not None
        rt.access_log.close()
    assert [(x["request_id"], x["method"]) for x in lines[:3]] == [
        ("complaint-42", "system_health"),
        ("complaint-42", "chain_getHeader"),
        (made, "author_submitExtrinsic"),
    ]
    write, health = lines[3], lines[4]
    assert (write["outcome"], write["upstream"], write["attempts"]) == ("refused", None, 0)
    assert write["upstream_ms"] is None and write["units"] == 0
    assert health["outcome"] == "ok" and health["attempts"] >= 1 and health["upstream"]
    first = lines[0]
    assert first["network"] == "finney" and first["status"] == 200 and first["outcome"] == "ok"
    assert first["tier"] == "default" and first["transport"] == "http"
    # each line its item's units: a batch's lines add up to its price; a refusal took none
    assert [x["units"] for x in lines] == [1, 1, 0, 0, 1]
    assert first["attempts"] >= 1 and first["cache"] in ("HIT", "MISS")
    assert isinstance(first["upstream_ms"], int) and 0 <= first["upstream_ms"]
    assert first["upstream_ms"] <= first["latency_ms"] + 1  # whole ms, rounded
    assert lines[2]["status"] == 403 and lines[2]["outcome"] == "refused"
    assert lines[2]["upstream_ms"] is None and lines[2]["attempts"] == 0  # no node asked
    assert body(f)[0]["id"] == 1


BIG = "0x" + "ab" * 524_288  # ~1 MiB of JSON: 16 units of bytes
HEAVY = "SubnetInfoRuntimeApi_get_all_metagraphs"


def _answers(doc: Any) -> tuple[int, bytes]:
    docs = doc if isinstance(doc, list) else [doc]
    out = [
        {"jsonrpc": "2.0", "id": d["id"], "result": BIG if d["method"] == "state_call" else 1}
        for d in docs
    ]
    return 200, json.dumps(out if isinstance(doc, list) else out[0]).encode()


async def test_each_line_carries_its_own_items_units_bytes_included(tmp_path: Path) -> None:
    """Summing ``units`` by client is what the client was charged: a batch's
    heavy item carries its bytes, its light one its single unit."""
    log = tmp_path / "access.jsonl"
    stages, fake, rt = make(access_log=str(log))
    fake.behaviour = {url: _answers for url in ("http://a.example:9944", "http://b.example:9944")}
    try:
        await run(stages, rpc_flow(call("state_call", [HEAVY, "0x"], id_=1)))  # learns its size
        batch = [call("state_call", [HEAVY, "0x01"], id_=2), call("system_health", id_=3)]
        f = await run(stages, rpc_flow(batch))
        lines = _lines(log, 3)
    finally:
        assert rt.access_log is not None
        rt.access_log.close()
    assert [(x["method"], x["units"]) for x in lines] == [
        ("state_call", 1 + 16),  # charged its bytes after the answer
        ("state_call", 1 + 16),  # reserved them before it was sent
        ("system_health", 1),
    ]
    assert sum(x["units"] for x in lines) == 100 - int(f.response.headers["X-RateLimit-Remaining"])


async def test_keys_never_reach_the_log(tmp_path: Path) -> None:
    key = "partner-key-0123456789abcdef"
    log = tmp_path / "access.jsonl"
    tiers = [{"name": "partners", "keys": [key]}]
    stages, _, rt = make(access_log=str(log), tiers=tiers)
    try:
        f = rpc_flow(call("system_health"), path=f"/rpc/v1/finney?api_key={key}")
        await run(stages, f)
        line = _lines(log, 1)[0]
    finally:
        assert rt.access_log is not None
        rt.access_log.close()
    assert line["tier"] == "partners"
    assert key not in log.read_text() and "key:" not in log.read_text()


async def test_a_wrong_keys_line_names_its_address(tmp_path: Path) -> None:
    """The log is where an operator finds who keeps sending a wrong or revoked
    key (OPERATIONS, "Who is refused"): its line names the address (was "")."""
    log = tmp_path / "access.jsonl"
    tiers = [{"name": "partners", "keys": ["partner-key-0123456789abcdef"]}]
    stages, _, rt = make(access_log=str(log), access_log_client="full", tiers=tiers)
    try:
        f = rpc_flow(call("system_health"))
        f.request.headers["X-Api-Key"] = "wrong-key-000000000000000000"
        await run(stages, f)
        assert f.response is not None and f.response.status_code == 401
        line = _lines(log, 1)[0]
    finally:
        assert rt.access_log is not None
        rt.access_log.close()
    assert line["client"] == f.client_conn.peername[0] and line["client"], line
    assert (line["status"], line["outcome"]) == (401, "refused")
    assert "wrong-key" not in log.read_text()


def test_a_full_disk_drops_lines_and_counts_them() -> None:
    dropped: list[int] = []
    log = AccessLog("/dev/full", on_drop=dropped.append)
    try:
        log._queue([b'{"a":1}'] * 10)
        deadline = time.monotonic() + 5
        while not log._failed and time.monotonic() < deadline:
            time.sleep(0.02)
        assert log._failed == 10  # counted on the loop side with the next call
    finally:
        log.close()


def test_a_writer_behind_drops_past_the_bound() -> None:
    dropped: list[int] = []
    log = AccessLog("/dev/null", on_drop=dropped.append)
    log._stop = True  # the writer still drains; the bound is what is waiting
    log._lines.extend([b"x"] * MAX_QUEUED)
    log._queue([b"y"] * 5)
    assert sum(dropped) == 5 and log.dropped == 5
    log.close()


@pytest.mark.parametrize("value", ["maybe", 3])
def test_bad_config_is_named(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"proxy\.access_log_client"):
        parse_config({"proxy": {"access_log_client": value, "access_log": "stdout"}})
