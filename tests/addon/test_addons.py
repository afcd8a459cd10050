"""The addon list: the guard answers a flow nobody answered with a JSON 500."""

from __future__ import annotations

from mitmproxy.test import tflow

from addon.addons import Guard
from tests.addon.helpers import (
    body,
)


async def test_guard_answers_a_flow_nobody_answered() -> None:
    f = tflow.tflow()
    Guard().request(f)
    assert f.response.status_code == 500 and body(f)["error"]["code"] == -32603
