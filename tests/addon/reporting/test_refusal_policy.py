"""The policy label of ``chainproxy_refusals_total``: what a refusal's
``data.policy`` names, from a bounded set."""

from __future__ import annotations

from typing import Any

import pytest

from addon.reporting.live_metrics import refusal_policy
from addon.rpc.jsonrpc import error_obj


@pytest.mark.parametrize(
    ("data", "label"),
    [
        ({"policy": "max_follows"}, "max_follows"),
        ({"policy": "state_unavailable"}, "state_unavailable"),
        ({"policy": "allowlist"}, "allowlist"),
        ({"policy": "100;w=60"}, "rate_limit"),
        ({"policy": "made-up"}, "request"),  # never a label of a client's choosing
        (None, "request"),
    ],
)
def test_each_refusal_is_counted_under_its_policy(data: Any, label: str) -> None:
    assert refusal_policy(error_obj(1, -32000, "refused", data)) == label
