"""``substrate-interface`` built on the proxy URL, its HTTP connections leaving
from a chosen loopback address (each test's own rate-limit identity).

The client is the real one; only its ``requests`` session gets an adapter that
binds the source address, installed before the constructor's first call
(``system_chain``)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import requests.adapters
import substrateinterface.base as si_base
from substrateinterface import SubstrateInterface
from substrateinterface.transport.http import HttpTransport


class _SourceAddressAdapter(requests.adapters.HTTPAdapter):
    def __init__(self, source_ip: str) -> None:
        self._source_ip = source_ip
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["source_address"] = (self._source_ip, 0)
        super().init_poolmanager(*args, **kwargs)


def substrate(url: str, source_ip: str) -> SubstrateInterface:
    class BoundTransport(HttpTransport):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.session.mount("http://", _SourceAddressAdapter(source_ip))

    with mock.patch.object(si_base, "HttpTransport", BoundTransport):
        return SubstrateInterface(url=url)


def substrate_ws(url: str, source_ip: str) -> SubstrateInterface:
    """The same client over WebSocket (``ws://`` URL, websocket-client), its
    connection leaving from ``source_ip``."""
    import socket
    from urllib.parse import urlsplit

    import websocket

    parts = urlsplit(url)
    sock = socket.create_connection(
        (parts.hostname, parts.port or 80), timeout=30, source_address=(source_ip, 0)
    )
    ws_url = url.replace("http://", "ws://", 1)
    conn = websocket.create_connection(ws_url, socket=sock, timeout=30)
    return SubstrateInterface(websocket=conn)
