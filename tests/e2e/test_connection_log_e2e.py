"""A proxy run as the launcher and the systemd units run it (mitmdump without
``-q``, ``flow_detail=0``, info logging) writes no line per client connection:
mitmproxy's ``client connect`` / ``client disconnect`` lines once made two
lines per connection, passing journald's rate limit on a busy stack and
taking the addon's own lines with them (a review sweep)."""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest

from addon.mitm.connection_log import ConnectionLines, quiet_connections
from tests.e2e.helpers import build_stack, call

pytestmark = pytest.mark.e2e


def test_the_filter_drops_only_the_connection_lines() -> None:
    import logging

    f = ConnectionLines()
    rec = lambda msg: logging.LogRecord("mitmproxy.proxy.server", 20, "", 0, msg, None, None)  # noqa: E731
    assert f.filter(rec("client connect"))  # off: mitmproxy's as it is
    f.on = True
    assert not f.filter(rec("client connect")) and not f.filter(rec("client disconnect"))
    assert f.filter(rec("connection handler has crashed: boom"))
    quiet_connections(None)  # mitmweb (no flow_detail): kept
    quiet_connections(0)
    quiet_connections(0)  # once on the logger, however often configured
    logger = logging.getLogger("mitmproxy.proxy.server")
    assert sum(isinstance(x, ConnectionLines) for x in logger.filters) == 1
    quiet_connections(1)


def test_no_line_per_connection_in_a_production_log(tmp_path: Any) -> None:
    stack = build_stack(tmp_path, ("alpha",), sets=("termlog_verbosity=info",))
    try:
        body = __import__("json").dumps(call("system_chain")).encode()
        for _ in range(20):  # a connection each
            req = urllib.request.Request(
                stack.rpc_url(), data=body, headers={"content-type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200
        assert stack.proxy is not None
        out = stack.proxy.output()
        assert "client connect" not in out and "client disconnect" not in out, out[-2000:]
        assert "chainproxy" in out  # the addon's own info lines are there
    finally:
        stack.stop()
