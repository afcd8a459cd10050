"""The answer sizes a proxy learned outlive it (``data_dir/answer_sizes.json``):
after a restart, the first 1 MiB read is priced before it is sent, as every
later one was before the restart, instead of going out as a light call and
being charged afterwards. Through a real mitmdump stopped with SIGTERM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.helpers import build_stack, call, next_client_ip, post

pytestmark = pytest.mark.e2e

METAGRAPHS = ["SubnetInfoRuntimeApi_get_all_metagraphs", "0x"]
KIND = "state_call:SubnetInfoRuntimeApi_get_all_metagraphs"
QUOTA = {"requests": 10, "window_s": 60}  # a ~1 MiB answer costs more than that


async def test_a_restarted_proxy_prices_the_first_heavy_read_up_front(tmp_path: Path) -> None:
    stack = build_stack(tmp_path, ("alpha",), rate_limit=QUOTA)
    try:
        sizes_file = Path(stack.config["data_dir"]) / "answer_sizes.json"
        # a process that never saw one: sent as a light call, answered, charged after
        r = await post(stack.rpc_url(), call("state_call", METAGRAPHS), client_ip=next_client_ip())
        assert r.status == 200 and len(r.raw) > 1_000_000, r.raw[:200]
        assert stack.proxy is not None
        assert stack.proxy.stop() == 0  # SIGTERM: a graceful stop writes the table
        saved = json.loads(sizes_file.read_text())
        assert saved["sizes"][KIND] > 1_000_000
        stack.start_proxy()
        # a fresh client, a fresh process: the read's expected units are asked first
        ip = next_client_ip()
        r = await post(stack.rpc_url(), call("state_call", METAGRAPHS), client_ip=ip)
        assert r.status == 429, r.raw[:300]
        data = r.body["error"]["data"]
        assert data["policy"] == "10;w=60" and data["cost"] > QUOTA["requests"], data
        # a light call of the same client still fits: only the heavy read was held back
        r = await post(stack.rpc_url(), call("system_health"), client_ip=ip)
        assert r.status == 200
    finally:
        stack.stop()


async def test_a_table_that_cannot_be_read_is_learned_again(tmp_path: Path) -> None:
    stack = build_stack(tmp_path, ("alpha",), rate_limit=QUOTA)
    try:
        sizes_file = Path(stack.config["data_dir"]) / "answer_sizes.json"
        assert stack.proxy is not None
        stack.proxy.stop()
        sizes_file.write_text("{half a table")
        stack.start_proxy()  # starts, logs it, and learns from the next answers
        r = await post(stack.rpc_url(), call("state_call", METAGRAPHS), client_ip=next_client_ip())
        assert r.status == 200
        assert stack.proxy.stop() == 0
        assert json.loads(sizes_file.read_text())["sizes"][KIND] > 1_000_000
    finally:
        stack.stop()
