"""Heavy reads pay for their expected bytes before they are sent, and are not
hedged (addon/steps/reserve_bytes.py, charge_bytes.py)."""

from __future__ import annotations

import json
from typing import Any

from addon.rpc.jsonrpc import Call
from tests.addon.helpers import body, call, make, rpc_flow, run

BIG = "0x" + "ab" * 524_288  # ~1 MiB of JSON
HEAVY = ["SubnetInfoRuntimeApi_get_all_metagraphs", "0x"]


def big_answers(doc: Any) -> tuple[int, bytes]:
    return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": BIG}).encode()


async def test_after_one_large_answer_its_kind_pays_up_front() -> None:
    stages, fake, rt = make()
    fake.behaviour = {
        url: big_answers for url in ("http://a.example:9944", "http://b.example:9944")
    }
    left = []
    for i in range(6):
        f = await run(stages, rpc_flow(call("state_call", [*HEAVY, f"0x{i:02x}"[:4]], id_=i)))
        left.append((f.response.status_code, int(f.response.headers["X-RateLimit-Remaining"])))
    # 1st: 1 before, 16 after; then 1 + 16 before each: 99, 66, 49, 32, 15, refused
    assert left[:5] == [(200, 99), (200, 66), (200, 49), (200, 32), (200, 15)]
    status, _ = left[5]
    assert status == 429
    heavy = Call(1, "state_call", HEAVY)
    assert rt.sizes.tracked(heavy) and rt.sizes.expected(heavy) > 1_000_000


async def test_a_refusal_up_front_names_the_cost() -> None:
    stages, fake, rt = make(rate_limit={"requests": 20, "window_s": 60})
    fake.behaviour = {
        url: big_answers for url in ("http://a.example:9944", "http://b.example:9944")
    }
    await run(stages, rpc_flow(call("state_call", HEAVY)))  # 17 of 20: learns the size
    rt.clock.advance(13)  # type: ignore[attr-defined]
    f = await run(stages, rpc_flow(call("state_call", [*HEAVY[:1], "0x01"], id_=9)))
    assert f.response.status_code == 429
    data = body(f)["error"]["data"]
    # its base unit and its bytes; the base unit taken by the quota step given back
    assert data["cost"] == 17 and body(f)["id"] == 9 and data["remaining"] == 3
    assert f.response.headers["X-RateLimit-Remaining"] == "3"
    # the window as the client left it: its one spend leaves in 47 s (before:
    # 60, the base unit given back counted as spent now)
    assert 46 <= int(f.response.headers["X-RateLimit-Reset"]) <= 47
    assert 46 <= int(f.response.headers["Retry-After"]) <= 47
    assert len(fake.seen) == 1  # the refused call never reached a node
    # the units counted: the first call's 17 and the refused one's base unit
    # (its bytes were never taken: before, 16 more)
    units = sum(v for k, v in rt.metrics._extra.items() if k[0] == "chainproxy_quota_units_total")
    assert units == 1 + 16 + 1, rt.metrics._extra
    later = await run(stages, rpc_flow(call("system_health", id_=10)))
    assert later.response.headers["X-RateLimit-Remaining"] == "2"  # nothing was taken


async def test_a_heavy_read_is_never_hedged() -> None:
    stages, fake, rt = make(hedge={"enabled": True})
    fake.behaviour = {
        url: big_answers for url in ("http://a.example:9944", "http://b.example:9944")
    }
    await run(stages, rpc_flow(call("state_call", HEAVY)))
    f = await run(stages, rpc_flow(call("state_call", [*HEAVY[:1], "0x02"])))
    assert f.response.status_code == 200
    assert f.metadata["chainproxy"]["hedged"] is False
    assert not any(name == "chainproxy_hedged_total" for (name, _labels) in rt.metrics._extra)


async def test_a_cache_hit_pays_no_bytes() -> None:
    from addon.cache.memory_store import MemoryStore

    stages, fake, rt = make()
    rt.cache = MemoryStore()
    fake.behaviour = {
        url: big_answers for url in ("http://a.example:9944", "http://b.example:9944")
    }
    pinned = [*HEAVY, "0x" + "cd" * 32]
    first = await run(stages, rpc_flow(call("state_call", pinned)))
    second = await run(stages, rpc_flow(call("state_call", pinned)))
    third = await run(stages, rpc_flow(call("system_health")))
    assert second.response.headers["X-Cache"] == "HIT"
    left = [int(f.response.headers["X-RateLimit-Remaining"]) for f in (first, second, third)]
    assert left == [99, 82, 81]  # the miss's 16 after it; the hit 1; a plain call 1


async def test_a_batch_that_already_subscribed_has_its_heavy_read_refused_in_place() -> None:
    """The subscribe step runs before the byte reservation: a batch whose
    heavy read does not fit has made its subscription already, so the batch
    is answered, the heavy read refused in its place (a 429 of the whole
    batch kept the subscription's id from its client) and the rest paid."""
    from addon.quota.quotas import Quotas
    from tests.addon.helpers import FakeHub, FakeSocket, pipeline_with_hub, ws_message

    hub = FakeHub()
    pipe, rt = pipeline_with_hub(hub, rate_limit={"requests": 20})
    rt.sizes.learn(Call(1, "state_call", HEAVY), 1_100_000, 65_536)  # a known heavy kind
    sock = FakeSocket()
    quotas: Quotas = rt.quotas
    assert quotas.decide(sock.client, 17).allowed  # 3 units left
    batch = [call("chain_subscribeNewHeads", id_=1), call("state_call", HEAVY, id_=2)]
    _, doc = await ws_message(pipe, sock, batch)
    assert doc[0] == {"jsonrpc": "2.0", "id": 1, "result": "sub1"} and len(hub.subscribed) == 1
    assert doc[1]["id"] == 2 and doc[1]["error"]["data"]["policy"] == "20;w=60"
    left = quotas.decide(sock.client, 1, take=False)
    assert left.remaining == 1  # the subscribe's and the read's price stay taken
    # alone, the same heavy read refused takes nothing
    _, doc = await ws_message(pipe, sock, call("state_call", HEAVY, id_=3))
    assert doc["error"]["code"] == -32005
    assert quotas.decide(sock.client, 1, take=False).remaining == 1
