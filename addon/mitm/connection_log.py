"""mitmproxy's two lines per client connection, left out of a production log.

mitmproxy logs ``client connect`` and ``client disconnect`` at info for every
client TCP connection (``mitmproxy.proxy.server``), whatever ``flow_detail``
says: a proxy run as the launcher and the systemd units run it (mitmdump,
``flow_detail=0``, no ``-q``) wrote two lines per connection, ~8.8 MB in two
minutes of a busy ``--workers`` stack, enough to pass journald's default rate
limit and have it drop the addon's own lines (a review sweep). With
``flow_detail`` 0, the choice of a log without a line per flow, those two
lines go too; mitmweb and ``flow_detail`` >= 1 keep them (a developer
watching connections), and every other line of that logger stays."""

from __future__ import annotations

import logging

LOGGER = "mitmproxy.proxy.server"
DROPPED = frozenset({"client connect", "client disconnect"})


class ConnectionLines(logging.Filter):
    """Drops exactly mitmproxy's per-connection lines while ``on``."""

    def __init__(self) -> None:
        super().__init__()
        self.on = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.on and record.msg in DROPPED)


_FILTER = ConnectionLines()


def quiet_connections(flow_detail: int | None) -> None:
    """Per-connection lines off when ``flow_detail`` is 0 (None: the option
    is absent, as under mitmweb: left as mitmproxy has them)."""
    logger = logging.getLogger(LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    _FILTER.on = flow_detail == 0
