"""The drain's bookkeeping of HTTP flows: what is in flight is waited for, and
once the drain is over nothing more is taken (a request that arrives on a
kept-alive connection then is closed unanswered, so a balancer's retry on
another worker leaves the call's one usage record, not two)."""

from __future__ import annotations

import pytest
from mitmproxy.test import tflow

from addon.hooks.drain import Drain
from addon.hooks.holder import RuntimeHolder


def _drain() -> Drain:
    return Drain(RuntimeHolder(), sockets=None)


def test_a_flow_is_in_flight_until_answered_or_failed() -> None:
    d = _drain()
    a, b = tflow.tflow(), tflow.tflow()
    d.requestheaders(a)
    d.requestheaders(b)
    assert d.inflight == {a.id, b.id}
    d.response(a)
    d.error(b)
    assert d.inflight == set()


def test_while_draining_an_answer_says_connection_close() -> None:
    d = _drain()
    f = tflow.tflow(resp=True)
    d.requestheaders(f)
    d.draining = True
    d.response(f)
    assert f.response is not None and f.response.headers["Connection"] == "close"
    assert f.error is None  # answered, not killed


@pytest.mark.parametrize(
    ("asked", "closes"),
    [("CLOSE", True), ("Close", True), ("keep-alive, Close", True), ("close", True),
     ("keep-alive", False), ("closed", False), (None, False)],
)  # fmt: skip
def test_a_client_asking_to_close_in_any_case_is_answered_connection_close(
    asked: str | None, closes: bool
) -> None:
    """mitmproxy closes after the answer only on a lower-case ``close`` token
    (RFC 9110: the options are case-insensitive); the answer's own
    ``Connection: close`` makes it close on any."""
    d = _drain()
    f = tflow.tflow(resp=True)
    assert f.response is not None
    f.response.headers.pop("Connection", None)
    if asked is not None:
        f.request.headers["Connection"] = asked
    d.requestheaders(f)
    d.response(f)
    assert (f.response.headers.get("Connection") == "close") is closes


def test_a_request_after_the_drain_ended_is_not_taken() -> None:
    d = _drain()
    d.draining = d.stopping = True
    f = tflow.tflow()
    d.requestheaders(f)
    assert f.id not in d.inflight
    assert f.error is not None and f.error.msg == "Connection killed."
    d.requestheaders(f)  # killed already: asked again, nothing more happens
