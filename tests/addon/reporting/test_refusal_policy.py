"""The policy label of ``chainproxy_refusals_total``: what a refusal's
``data.policy`` names, from a bounded set; and a refusal is one in every view
(the requests counter, the refusals counter, the access log, the usage
records)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from addon.reporting.live_metrics import REFUSALS, refusal_policy
from addon.rpc.jsonrpc import error_obj
from tests.addon.helpers import call, make, request_counts, rpc_flow, run
from tests.addon.reporting.test_access_log import _lines
from tests.addon.steps.test_forward_pending import _Refusing


@pytest.mark.parametrize(
    ("data", "label"),
    [
        ({"policy": "max_follows"}, "max_follows"),
        ({"policy": "state_unavailable"}, "state_unavailable"),
        ({"policy": "upstream_capacity"}, "upstream_capacity"),
        ({"policy": "allowlist"}, "allowlist"),
        ({"policy": "100;w=60"}, "rate_limit"),
        ({"policy": "made-up"}, "request"),  # never a label of a client's choosing
        (None, "request"),
    ],
)
def test_each_refusal_is_counted_under_its_policy(data: Any, label: str) -> None:
    assert refusal_policy(error_obj(1, -32000, "refused", data)) == label


async def _refused_for_capacity(log: Path, calls: Any) -> tuple[Any, list[dict[str, Any]]]:
    """``calls`` sent where every node refuses ``state_getKeysPaged`` for its
    limits (a proxy of its own: the refusal pauses the nodes)."""
    stages, _, rt = make(access_log=str(log), access_log_client="full")
    rt.transport = _Refusing()
    try:
        await run(stages, rpc_flow(calls))
        lines = _lines(log, len(calls) if isinstance(calls, list) else 1)
    finally:
        assert rt.access_log is not None
        rt.access_log.close()
    return rt, lines


@pytest.mark.parametrize("batch", [False, True])
async def test_a_refusal_for_capacity_is_one_refusal_in_every_view(
    tmp_path: Path, batch: bool
) -> None:
    """Every node refused for its limits: the client's 503 (a batch item's
    error) is counted as refused in the requests counter, once under its
    policy, ``refused`` in the access log (no cache looked up), and is no
    usage record, where it was an error (the stats sweep's three stories)."""
    keys = call("state_getKeysPaged", ["0x26aa", 10], id_=3)
    rt, lines = await _refused_for_capacity(
        tmp_path / "access.jsonl", [call("system_health", id_=2), keys] if batch else keys
    )
    counts = request_counts(rt)
    assert counts[("state_getKeysPaged", "refused")] == 1
    assert ("state_getKeysPaged", "error") not in counts
    refusals = {k: v for k, v in rt.metrics._extra.items() if k[0] == REFUSALS}
    assert refusals == {(REFUSALS, (("policy", "upstream_capacity"),)): 1}
    assert (lines[-1]["method"], lines[-1]["outcome"], lines[-1]["cache"]) == (
        "state_getKeysPaged", "refused", None,
    )  # fmt: skip
    if batch:
        assert (lines[0]["outcome"], lines[0]["cache"]) == ("ok", "MISS")
    records = {r["method"] for r in rt.usage.drain()}
    assert records == ({"system_health"} if batch else set()), records
