"""aiohttp server exposing a simulated Substrate node, with run-time fault injection.

RPC: POST on any path except ``/_sim/...``; a GET with a WebSocket upgrade on
any such path is JSON-RPC over WebSocket (``simnode.ws``). Control:
``POST /_sim/control``, ``POST /_sim/reset``, ``GET /_sim/state``,
``GET /_sim/arrivals`` (``simnode.control``, ``simnode.arrivals``); the faults
themselves are in ``simnode.faults``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from aiohttp import web

from .arrivals import METHODS_KEPT, Arrival, ArrivalLog
from .chain import FINNEY_GENESIS, PRUNING_DEPTH, Chain, ChainConfig
from .control import add_control_routes
from .faults import FAULT_KEYS, GARBAGE_HTML, Faults, FaultState, faulted_answer
from .replies import JSON_CT, drop, status_response, too_many_requests
from .rpc import Call, Dispatcher, Parsed, parse
from .runtime import BASE_SPEC
from .window import CallRate
from .ws import WebSocketRpc

MAX_BODY = 15 * 1024 * 1024  # substrate's default max request size


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
        upgrade_at: int | None = None,
        upgrade_spec: int = BASE_SPEC + 1,
        state_keep: int | None = None,
    ) -> None:
        """``state_keep``: blocks of state kept (default 256, or every block's
        with ``archive``); a reset goes back to it."""
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
        self._clock = clock
        self.fault_state = FaultState(rng_seed, clock)
        # the runtime upgrade and the pruning the node starts with (the command
        # line's); a reset keeps them
        keep = state_keep if state_keep is not None else None if archive else PRUNING_DEPTH
        self._initial = {
            "upgrade_at": upgrade_at,
            "upgrade_spec": upgrade_spec,
            "state_keep": keep,
        }
        self.apply_faults(self._initial)
        self.shutdown_timeout = shutdown_timeout
        self._requests = 0
        self._calls: dict[str, int] = {}
        self._bytes_out = 0  # bytes of the RPC answers sent (HTTP bodies, WS messages)
        self._rate = CallRate()  # calls received (HTTP and WS) per sliding 1 s
        self._rate_limited = 0  # HTTP requests answered 429 by the ``limit_rps`` fault
        self.arrivals = ArrivalLog()  # each request's arrival, methods and sender
        self._on_die = on_die
        self._stopping = False
        self._stopped = asyncio.Event()
        self._stopped.set()
        self._runner: web.AppRunner | None = None
        self._ws = WebSocketRpc(self)
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

    @property
    def stopping(self) -> bool:
        """Between ``stop()`` and the next ``start()``: handlers drop what they hold."""
        return self._stopping

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        add_control_routes(app, self)
        app.router.add_post("/{tail:.*}", self._handle_rpc)
        app.router.add_get("/{tail:.*}", self._ws.handle)
        app.on_shutdown.append(self._ws.close_all)
        return app

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("SimNode already started")
        self._stopping = False
        self._stop_task = None
        self.fault_state.restart()
        runner = web.AppRunner(
            self.make_app(),
            access_log=None,  # per-request logging would dominate benchmark CPU
            handle_signals=False,
            shutdown_timeout=self.shutdown_timeout,
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
            self.fault_state.release()  # hung handlers wake up and drop their connection
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
        return self.fault_state.faults

    def set_faults(self, **changes: Any) -> dict[str, Any]:
        """Change some faults (others unchanged); returns the full fault state."""
        if self.apply_faults(changes):
            self.die()
        return self.faults.to_json()

    def apply_faults(self, changes: dict[str, Any]) -> bool:
        """Validate all, then apply all (all-or-nothing). Returns whether to die."""
        die = self.fault_state.apply(changes, self.chain)
        f = self.fault_state.faults
        self.dispatcher.refuse(f.refuse_methods, f.refuse_code, f.refuse_message)
        return die

    def die(self) -> None:
        """The ``die`` fault: ``on_die`` (the command exits at once), else stop serving."""
        if self._on_die is not None:
            self._on_die()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._die_task = loop.create_task(self.stop())

    def reset(self) -> dict[str, Any]:
        """Clear all faults (back to the upgrade the node started with) and
        counters; returns the state."""
        self.apply_faults({k: getattr(Faults(), k) for k in FAULT_KEYS - {"die"}} | self._initial)
        self._requests = 0
        self._calls = {}
        self._bytes_out = 0
        self._rate.clear()
        self.arrivals.clear()
        self._rate_limited = 0
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
            "fork_at": chain.fork_at,  # blocks above it have the fork's hashes (None: no fork)
            "genesis": chain.genesis_hash(),
            "spec_version": chain.spec_version(chain.best()),
            "archive": chain.config.archive,
            "state_keep": chain.state_keep,
            "faults": self.faults.to_json(),
            "requests": self._requests,
            "calls": dict(self._calls),
            "bytes_out": self._bytes_out,
            "rate_limited": self._rate_limited,
            "calls_in_last_s": self._rate.in_window(self._clock()),
            "max_rps_seen": self._rate.max_seen,
            "submitted": self.dispatcher.submitted,
            "subscriptions": self._ws.subscriptions,
            "muted_notifications": self._ws.muted,
        }

    @property
    def requests(self) -> int:
        return self._requests

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._calls)

    @property
    def bytes_out(self) -> int:
        return self._bytes_out

    def count_bytes(self, n: int) -> None:
        """An RPC answer of ``n`` bytes sent (its HTTP body, or its WebSocket message)."""
        self._bytes_out += n

    @property
    def rate_limited(self) -> int:
        return self._rate_limited

    def count(
        self, parsed: Parsed, request: web.Request, transport: str = "http", refused: bool = False
    ) -> None:
        """One request (an HTTP POST or a WebSocket message on ``request``'s
        connection) and each call in it (for the call rate, each entry of a
        batch, valid or not, is a call); ``refused``: the ``limit_rps`` fault
        answers it 429."""
        now = self._clock()
        self._requests += 1
        self._rate.add(now, len(parsed.entries))
        self.arrivals.add(
            Arrival(
                t=now,
                transport=transport,
                calls=len(parsed.entries),
                methods=tuple(getattr(e, "method", "") for e in parsed.entries[:METHODS_KEPT]),
                agent=request.headers.get("User-Agent", ""),
                peer=_peer(request),
                refused=refused,
            )
        )
        calls = self._calls
        for entry in parsed.entries:
            if type(entry) is Call:
                calls[entry.method] = calls.get(entry.method, 0) + 1

    # ---- JSON-RPC over HTTP ---------------------------------------------------

    async def _handle_rpc(self, request: web.Request) -> web.StreamResponse:
        parsed = parse(await request.read())
        fs = self.fault_state
        # nothing is awaited between the verdict and the log: its entry is this request's
        refused = fs.slow and not self._stopping and not fs.admit(len(parsed.entries))
        self.count(parsed, request, refused=refused)
        if refused:
            self._rate_limited += 1
            first = parsed.entries[0]
            return too_many_requests(None if parsed.batch else first.id, fs.retry_after())
        if fs.slow or self._stopping:
            return await self._faulted(request, parsed)
        body = self.dispatcher.respond(parsed)
        self._bytes_out += len(body)
        return web.Response(body=body, content_type=JSON_CT)

    async def _faulted(self, request: web.Request, parsed: Parsed) -> web.StreamResponse:
        a = await faulted_answer(
            self.fault_state,
            partial(self.dispatcher.respond, parsed),
            lambda: self._stopping,
        )
        if a.kind == "stopping" or a.kind == "drop":
            return drop(request)
        if a.kind == "status":
            return status_response(a.status)
        if a.kind == "garbage":
            return web.Response(text=GARBAGE_HTML, content_type="text/html")
        body = a.body
        if a.truncate and len(body) > 1:
            # Content-Length matches what is sent, so the client only sees bad JSON.
            body = body[: len(body) // 2]
        self._bytes_out += len(body)
        return web.Response(body=body, content_type=JSON_CT)


def _peer(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else ""
