"""Helpers for the probe tests (servers on 127.0.0.1, endpoints built by the config)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from chainproxy.supervisor import free_port as free_port  # the tests' one
from common.config import Endpoint, parse_config

FIXED_NOW = 1_700_000_000.0
SECRETS = ("SECRET123", "hunter2pw", "alice-user")


def clock() -> float:
    return FIXED_NOW


def make_endpoint(
    url: str, kind: str, *, network: str = "finney", archive: bool = False
) -> Endpoint:
    """A real registry entry (id, safe_url) built the way the config builds it."""
    entry = {"url": url, "provider": "test", "kind": kind, "network": network, "archive": archive}
    cfg = parse_config({"registry": {"endpoints": [entry]}}, env={})
    return cfg.endpoints[0]


def secret_url(base: str, path: str = "/") -> str:
    """``base`` (scheme://host:port) with credentials in userinfo and the query."""
    scheme, rest = base.split("://", 1)
    return f"{scheme}://alice-user:hunter2pw@{rest}{path}?apikey=SECRET123"


def assert_no_secret(detail: str) -> None:
    for s in SECRETS:
        assert s not in detail, detail


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class TinyServer:
    """An aiohttp app on 127.0.0.1 with the given routes (path -> handler, any method)."""

    def __init__(self, routes: dict[str, Handler]) -> None:
        self.app = web.Application()
        for path, handler in routes.items():
            self.app.router.add_route("*", path, handler)
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> TinyServer:
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "/") -> str:
        return self.base + path

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


StartServer = Callable[[dict[str, Handler]], Awaitable[TinyServer]]
