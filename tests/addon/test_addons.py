"""The addon list: the guards answer a flow nobody answered with a JSON 500."""

from __future__ import annotations

from mitmproxy.proxy.layers.http import HttpRequestHook
from mitmproxy.test import taddons, tflow

from addon.addons import OUTER_GUARD, Guard, install_outer_guard
from addon.runtime import Runtime
from common.config import parse_config
from tests.addon.helpers import (
    body,
)


async def test_guard_answers_a_flow_nobody_answered() -> None:
    f = tflow.tflow()
    Guard().request(f)
    assert f.response.status_code == 500 and body(f)["error"]["code"] == -32603


class _Script:
    """A script's addons as mitmproxy holds them: children of one addon."""

    def __init__(self, *children: object) -> None:
        self.addons = list(children)


class _Raising:
    def request(self, flow: object) -> None:
        raise RuntimeError("a bug in a stage")


async def test_a_stage_that_raises_is_a_500_from_the_outer_guard() -> None:
    """mitmproxy's own addon manager: the exception ends the walk of the script's
    addons (its Guard never runs), the guard on mitmproxy's chain answers."""
    with taddons.context() as tctx:
        inner = Guard()
        tctx.master.addons.add(_Script(_Raising(), inner))
        install_outer_guard()
        install_outer_guard()  # a reload of the script: still one
        assert tctx.master.addons.get(OUTER_GUARD) is not None
        f = tflow.tflow()
        await tctx.master.addons.handle_lifecycle(HttpRequestHook(f))
        assert f.response is not None and f.response.status_code == 500
        assert body(f)["error"]["message"] == "internal proxy error"


async def test_without_the_outer_guard_the_flow_would_be_forwarded() -> None:
    """The premise of the test above: the script's own Guard alone is skipped."""
    with taddons.context() as tctx:
        tctx.master.addons.add(_Script(_Raising(), Guard()))
        f = tflow.tflow()
        await tctx.master.addons.handle_lifecycle(HttpRequestHook(f))
        assert f.response is None


def test_the_follow_gauge_is_reported_at_zero_too() -> None:
    """``chainproxy_client_subscriptions{method="chainHead_v1_follow"}``: with no
    follow open it is 0, not left out (the series vanished after the last
    unfollow while the legacy methods' stayed at 0)."""
    rt = Runtime.build(parse_config({}))
    assert rt.gauges()["client_subscriptions"]["chainHead_v1_follow"] == 0
