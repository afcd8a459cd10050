"""aiohttp server exposing a simulated Substrate node, with run-time fault injection.

RPC: POST on any path except ``/_sim/...``; a GET with a WebSocket upgrade on
any such path is JSON-RPC over WebSocket (each text message a request or batch,
no subscriptions). Control: ``POST /_sim/control``, ``POST /_sim/reset``,
``GET /_sim/state``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from .chain import FINNEY_GENESIS, Chain, ChainConfig, is_hash
from .rpc import Call, Dispatcher, Parsed, parse

JSON_CT = "application/json"
MAX_BODY = 15 * 1024 * 1024  # substrate's default max request size

GARBAGE_HTML = (
    "<!DOCTYPE html><html><head><title>Just a moment...</title></head>"
    "<body><h1>Checking your browser before accessing the site.</h1>"
    "<p>simnode garbage fault</p></body></html>"
)


@dataclass(frozen=True, slots=True)
class Faults:
    """Fault state of a node; the default instance means 'healthy'."""

    latency_ms: float = 0.0
    error_rate: float = 0.0
    http_status: int | None = None
    hang: bool = False
    close: bool = False
    truncate: bool = False
    garbage: bool = False
    lag: int = 0
    freeze: bool = False
    genesis: str | None = None
    die: bool = False

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @property
    def slow_path(self) -> bool:
        """Whether any fault needs the slow path of the RPC handler."""
        return bool(
            self.latency_ms
            or self.error_rate
            or self.http_status is not None
            or self.hang
            or self.close
            or self.truncate
            or self.garbage
        )


FAULT_KEYS = frozenset(f.name for f in dataclasses.fields(Faults))
_BOOL_KEYS = frozenset({"hang", "close", "truncate", "garbage", "freeze", "die"})


def _check_fault(key: str, value: Any) -> Any:
    """Validated value for one control key; raises ValueError with a readable reason."""
    if key not in FAULT_KEYS:
        raise ValueError(f"unknown fault {key!r}; known: {sorted(FAULT_KEYS)}")
    if key in _BOOL_KEYS:
        if not isinstance(value, bool):
            raise ValueError(f"{key} must be a boolean")
        return value
    is_num = isinstance(value, int | float) and not isinstance(value, bool)
    if key == "latency_ms":
        if not is_num or value < 0:
            raise ValueError("latency_ms must be a number >= 0")
        return float(value)
    if key == "error_rate":
        if not is_num or not 0 <= value <= 1:
            raise ValueError("error_rate must be a number in [0, 1]")
        return float(value)
    if key == "http_status":
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or not 100 <= value <= 599
        ):
            raise ValueError("http_status must be an HTTP status code or null")
        return value
    if key == "lag":
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError("lag must be an integer >= 0")
        return value
    # genesis
    if value is not None and not is_hash(value):
        raise ValueError("genesis must be a 0x-prefixed 32-byte hex hash or null")
    return value.lower() if value is not None else None


class SimNode:
    """A simulated subtensor node served over HTTP on 127.0.0.1 (by default).

    Use ``await start()`` / ``await stop()`` (or ``async with``). Faults can be set
    with :meth:`set_faults` in-process or over HTTP at ``/_sim/control``.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str = "sim",
        seed: str = "finney",
        genesis: str = FINNEY_GENESIS,
        block_time: float = 12.0,
        epoch: float | None = None,
        start_height: int = 0,
        archive: bool = False,
        chain_name: str = "Bittensor",
        clock: Callable[[], float] = time.time,
        rng_seed: int | None = None,
        on_die: Callable[[], None] | None = None,
        shutdown_timeout: float = 0.5,
    ) -> None:
        config = ChainConfig(
            seed=seed,
            genesis=genesis,
            block_time=block_time,
            epoch=clock() if epoch is None else epoch,
            start_height=start_height,
            archive=archive,
            chain_name=chain_name,
        )
        self.name = name
        self.host = host
        self._port = port
        self.chain = Chain(config, clock)
        self.dispatcher = Dispatcher(self.chain)
        self._faults = Faults()
        self._slow = False
        self._requests = 0
        self._calls: dict[str, int] = {}
        self._rng = random.Random(rng_seed)
        self._on_die = on_die
        self._shutdown_timeout = shutdown_timeout
        # Set while no hang fault is active; hung handlers wait on it.
        self._unhang = asyncio.Event()
        self._unhang.set()
        self._stopping = False
        self._stopped = asyncio.Event()
        self._stopped.set()
        self._runner: web.AppRunner | None = None
        self._websockets: set[web.WebSocketResponse] = set()
        self._stop_task: asyncio.Task[None] | None = None
        self._die_task: asyncio.Task[None] | None = None

    # ---- lifecycle ----------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._port}"

    @property
    def running(self) -> bool:
        return self._runner is not None and not self._stopping

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_get("/_sim/state", self._handle_state)
        app.router.add_post("/_sim/control", self._handle_control)
        app.router.add_post("/_sim/reset", self._handle_reset)
        app.router.add_route("*", "/_sim/{tail:.*}", self._handle_sim_unknown)
        app.router.add_post("/{tail:.*}", self._handle_rpc)
        app.router.add_get("/{tail:.*}", self._handle_ws)
        app.on_shutdown.append(self._close_websockets)
        return app

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("SimNode already started")
        self._stopping = False
        self._stop_task = None
        self._faults = dataclasses.replace(self._faults, die=False)
        if self._faults.hang:
            self._unhang.clear()  # stop() set it to flush hung handlers
        runner = web.AppRunner(
            self.make_app(),
            access_log=None,  # per-request logging would dominate benchmark CPU
            handle_signals=False,
            shutdown_timeout=self._shutdown_timeout,
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._port = runner.addresses[0][1]
        self._runner = runner
        self._stopped.clear()

    async def stop(self) -> None:
        """Stop serving; idempotent and safe to call concurrently."""
        if self._stop_task is None:
            if self._runner is None:
                return
            self._stopping = True
            self._unhang.set()  # hung handlers wake up and drop their connection
            self._stop_task = asyncio.ensure_future(self._cleanup())
        await asyncio.shield(self._stop_task)

    async def _cleanup(self) -> None:
        runner = self._runner
        try:
            if runner is not None:
                await runner.cleanup()
        finally:
            self._runner = None
            self._stopped.set()

    async def wait_stopped(self) -> None:
        """Wait until the server is down, e.g. after a ``die`` fault."""
        await self._stopped.wait()

    async def __aenter__(self) -> SimNode:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---- faults and observation ---------------------------------------------

    @property
    def faults(self) -> Faults:
        return self._faults

    def set_faults(self, **changes: Any) -> dict[str, Any]:
        """Change some faults (others unchanged); returns the full fault state."""
        die = self._apply_faults(changes)
        if die:
            self._trigger_die()
        return self._faults.to_json()

    def _apply_faults(self, changes: dict[str, Any]) -> bool:
        """Validate all, then apply all (all-or-nothing). Returns whether to die."""
        checked = {k: _check_fault(k, v) for k, v in changes.items()}
        faults = dataclasses.replace(self._faults, **checked)
        chain = self.chain
        chain.set_lag(faults.lag)
        chain.set_frozen(faults.freeze)
        chain.set_genesis_override(faults.genesis)
        self._faults = faults
        self._slow = faults.slow_path
        if faults.hang:
            self._unhang.clear()
        else:
            self._unhang.set()
        return checked.get("die", False) is True

    def _trigger_die(self) -> None:
        if self._on_die is not None:
            self._on_die()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._die_task = loop.create_task(self.stop())

    def reset(self) -> dict[str, Any]:
        """Clear all faults and counters; returns the state."""
        self._apply_faults({k: getattr(Faults(), k) for k in FAULT_KEYS - {"die"}})
        self._requests = 0
        self._calls = {}
        self.dispatcher.submitted = 0
        return self.state()

    def state(self) -> dict[str, Any]:
        chain = self.chain
        return {
            "name": self.name,
            "url": self.url,
            "best": chain.best(),
            "finalized": chain.finalized(),
            "head": chain.head(),
            "genesis": chain.genesis_hash(),
            "archive": chain.config.archive,
            "faults": self._faults.to_json(),
            "requests": self._requests,
            "calls": dict(self._calls),
            "submitted": self.dispatcher.submitted,
        }

    @property
    def requests(self) -> int:
        return self._requests

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._calls)

    # ---- HTTP handlers --------------------------------------------------------

    async def _handle_rpc(self, request: web.Request) -> web.StreamResponse:
        self._requests += 1
        parsed = parse(await request.read())
        calls = self._calls
        for entry in parsed.entries:
            if type(entry) is Call:
                calls[entry.method] = calls.get(entry.method, 0) + 1
        if self._slow or self._stopping:
            return await self._faulted(request, parsed)
        return web.Response(body=self.dispatcher.respond(parsed), content_type=JSON_CT)

    async def _faulted(self, request: web.Request, parsed: Parsed) -> web.StreamResponse:
        if self._faults.hang:
            # Only this handler waits; other requests and /_sim/ keep being served.
            while self._faults.hang and not self._stopping:
                await self._unhang.wait()
        if self._stopping:
            return _drop(request)
        latency = self._faults.latency_ms
        if latency > 0:
            await asyncio.sleep(latency / 1000)
            if self._stopping:
                return _drop(request)
        f = self._faults  # re-read: faults may have changed while we waited
        if f.close:
            return _drop(request)
        if f.http_status is not None:
            return _status_response(f.http_status)
        if f.garbage:
            return web.Response(text=GARBAGE_HTML, content_type="text/html")
        fail = self._roll_error if f.error_rate > 0 else None
        body = self.dispatcher.respond(parsed, fail)
        if f.truncate and len(body) > 1:
            # Content-Length matches what is sent, so the client only sees bad JSON.
            body = body[: len(body) // 2]
        return web.Response(body=body, content_type=JSON_CT)

    # ---- WebSocket JSON-RPC -----------------------------------------------------
    # Faults present at the upgrade act on the handshake (hang, close, http_status,
    # garbage); faults present when a message arrives act on that message's answer.
    # Each message counts as one request in the counters.

    async def _handle_ws(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=MAX_BODY, timeout=self._shutdown_timeout)
        if not ws.can_prepare(request).ok:
            raise web.HTTPMethodNotAllowed(request.method, ["POST"])
        rejected = await self._ws_handshake_fault(request)
        if rejected is not None:
            return rejected
        await ws.prepare(request)
        self._websockets.add(ws)
        # One task per message: a slow or hung answer does not block the others,
        # as with a real node's concurrent WS request handling.
        tasks: set[asyncio.Task[None]] = set()
        try:
            async for msg in ws:
                if msg.type is WSMsgType.TEXT or msg.type is WSMsgType.BINARY:
                    task = asyncio.ensure_future(self._ws_message(request, ws, msg.data))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                elif msg.type is WSMsgType.ERROR:
                    break
        finally:
            self._websockets.discard(ws)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        return ws

    async def _ws_handshake_fault(self, request: web.Request) -> web.StreamResponse | None:
        """The response replacing the upgrade under a fault, or None to accept it."""
        if not (self._slow or self._stopping):
            return None
        while self._faults.hang and not self._stopping:
            await self._unhang.wait()
        f = self._faults
        if self._stopping or f.close:
            return _drop(request)
        if f.http_status is not None:
            return _status_response(f.http_status)
        if f.garbage:  # e.g. a CDN challenge page instead of the upgrade
            return web.Response(text=GARBAGE_HTML, content_type="text/html")
        return None

    async def _ws_message(
        self, request: web.Request, ws: web.WebSocketResponse, data: str | bytes
    ) -> None:
        self._requests += 1
        parsed = parse(data)
        calls = self._calls
        for entry in parsed.entries:
            if type(entry) is Call:
                calls[entry.method] = calls.get(entry.method, 0) + 1
        if self._slow or self._stopping:
            out = await self._ws_faulted(request, ws, parsed)
        else:
            out = self.dispatcher.respond(parsed).decode()
        if not out:  # only notifications, or the fault already acted
            return
        try:
            await ws.send_str(out)
        except (ConnectionError, RuntimeError):
            pass  # the client went away meanwhile

    async def _ws_faulted(
        self, request: web.Request, ws: web.WebSocketResponse, parsed: Parsed
    ) -> str:
        while self._faults.hang and not self._stopping:
            await self._unhang.wait()
        if self._stopping:
            return ""  # shutdown closes the socket
        latency = self._faults.latency_ms
        if latency > 0:
            await asyncio.sleep(latency / 1000)
            if self._stopping:
                return ""
        f = self._faults  # re-read: faults may have changed while we waited
        if f.close:
            _drop(request)  # cut the TCP connection, no close frame
            return ""
        if f.http_status is not None:
            # No HTTP status on an open socket: the node ends the session instead.
            await ws.close(code=WSCloseCode.TRY_AGAIN_LATER, message=str(f.http_status).encode())
            return ""
        if f.garbage:
            return GARBAGE_HTML
        fail = self._roll_error if f.error_rate > 0 else None
        body = self.dispatcher.respond(parsed, fail).decode()
        if f.truncate and len(body) > 1:
            body = body[: len(body) // 2]
        return body

    async def _close_websockets(self, app: web.Application) -> None:
        """On shutdown, end open sessions with 'going away' instead of leaving them hung."""
        sockets = list(self._websockets)
        if sockets:
            await asyncio.gather(
                *(ws.close(code=WSCloseCode.GOING_AWAY, message=b"shutdown") for ws in sockets),
                return_exceptions=True,
            )

    def _roll_error(self) -> bool:
        return self._rng.random() < self._faults.error_rate

    async def _handle_control(self, request: web.Request) -> web.StreamResponse:
        try:
            changes = json.loads(await request.read() or b"{}")
        except ValueError:
            return _json_response({"error": "body must be a JSON object"}, status=400)
        if not isinstance(changes, dict):
            return _json_response({"error": "body must be a JSON object"}, status=400)
        try:
            die = self._apply_faults(changes)
        except (ValueError, TypeError) as exc:
            return _json_response({"error": str(exc)}, status=400)
        resp = _json_response(self._faults.to_json())
        if die:
            # Answer the controller first, then die.
            await resp.prepare(request)
            await resp.write_eof()
            self._trigger_die()
        return resp

    async def _handle_reset(self, request: web.Request) -> web.StreamResponse:
        return _json_response(self.reset())

    async def _handle_state(self, request: web.Request) -> web.StreamResponse:
        return _json_response(self.state())

    async def _handle_sim_unknown(self, request: web.Request) -> web.StreamResponse:
        return _json_response({"error": f"unknown control endpoint {request.path}"}, status=404)


def _drop(request: web.Request) -> web.StreamResponse:
    """Close the connection without a response.

    aiohttp's attempt to send the returned response then fails with a
    ConnectionError, which it treats as a client disconnect (nothing logged).
    """
    transport = request.transport
    if transport is not None:
        transport.close()
    return web.Response()


def _status_response(status: int) -> web.Response:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return web.Response(status=status, text=f"{status} {phrase}\n", headers=headers)


def _json_response(doc: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(doc, separators=(",", ":")).encode(), status=status, content_type=JSON_CT
    )
