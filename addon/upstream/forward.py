"""Forwarding with failover: up to N attempts on distinct upstreams, each with
its own timeout, all within one overall deadline. The caller sees one answer.

The transport is a small Protocol so the loop is tested with in-process fakes;
``AiohttpTransport`` is the real one (one shared, pooled ClientSession).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from asyncio import FIRST_COMPLETED
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import aiohttp
from multidict import CIMultiDict

from addon.pipeline.jsonrpc import Call, dumps
from addon.upstream.admission import Admission
from addon.upstream.backoff import parse_retry_after
from addon.upstream.budgets import Ticket
from addon.upstream.failover import assess
from addon.upstream.hedge import Hedger
from addon.upstream.pool import Upstream, UpstreamPool

TOO_MANY = frozenset({"rate-limited", "http-503"})  # 429; 503 (a pause if Retry-After)

# What a node answers for a block it does not have (reorged away, not imported
# yet, pruned, or another fork's): for a read the proxy pinned, a miss of the pin.
PIN_MISSES = frozenset({"unknown-block", "state-discarded", "null-pinned", "wrong-block"})


class TransportError(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after  # the node's Retry-After, in seconds


class Transport(Protocol):
    async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        """POST ``body``; the status and whole body, or ``TransportError``."""
        ...


@dataclass(frozen=True, slots=True)
class Attempt:
    endpoint: str  # endpoint id, never the URL (it may hold a secret)
    provider: str
    outcome: Literal["ok", "soft", "hard"]
    reason: str
    latency_ms: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "reason": self.reason or "ok",
            "latency_ms": self.latency_ms,
        }


ResultKind = Literal["ok", "soft", "failed", "deadline", "no-upstream", "capacity"]


@dataclass(frozen=True, slots=True)
class ForwardResult:
    kind: ResultKind
    answers: tuple[dict[str, Any], ...] | None  # one per call, in order (ok / soft)
    attempts: tuple[Attempt, ...]
    upstream: Upstream | None  # whose answer it is
    hedged: bool = False  # a second upstream raced a slow first one
    body_bytes: int = 0  # the size of the answer's body as the upstream sent it
    retry_after_s: float = 0.0  # "capacity": when a node's budget is expected to free up
    pin_missed: bool = False  # a node did not know the block the proxy pinned the call to

    @property
    def retry_after(self) -> int:
        """Whole seconds for ``Retry-After`` (at least 1)."""
        return max(1, math.ceil(self.retry_after_s))

    @property
    def failover(self) -> bool:
        return len(self.attempts) > 1


@dataclass(frozen=True, slots=True)
class Budget:
    max_attempts: int
    attempt_timeout_s: float
    deadline_s: float


def outbound_body(calls: Sequence[Call], is_batch: bool) -> bytes:
    """The request sent upstream: the caller's calls renumbered 0..n-1, so answers
    are matched to calls even when the caller reused or nulled ids."""
    objs = [
        {"jsonrpc": "2.0", "id": i, "method": c.method, "params": c.params}
        for i, c in enumerate(calls)
    ]
    return dumps(objs if is_batch else objs[0])


async def forward(
    calls: Sequence[Call],
    *,
    is_batch: bool,
    pool: UpstreamPool,
    transport: Transport,
    budget: Budget,
    clock: Callable[[], float],
    tip: int | None = None,
    min_block: int | None = None,
    prefer_archive: bool = False,
    hedger: Hedger | None = None,
    admission: Admission | None = None,
    pinned: bool = False,
) -> ForwardResult:
    """Attempts one after the other (failover); with a ``hedger``, an attempt
    not answered within its delay gets a second one racing it on the next-best
    upstream, the first good answer wins and the other is cancelled. With an
    ``admission``, each attempt takes a place in its node's budget (waiting its
    fair turn if every node's is spent), and a node that answers "too many
    requests" pauses instead of counting as failed."""
    body = outbound_body(calls, is_batch)
    deadline = clock() + budget.deadline_s
    tried: set[str] = set()
    attempts: list[Attempt] = []
    soft: tuple[tuple[dict[str, Any], ...], Upstream, int] | None = None
    by_deadline = False
    hedged = False  # a second upstream was sent the call
    waited = False  # the hedge delay passed once (one hedge per call at most)
    # each attempt in flight: its upstream, start, timeout and budget ticket
    running: dict[asyncio.Task[tuple[int, bytes]], tuple[Upstream, float, float, Ticket | None]]
    running = {}
    if hedger is not None:
        hedger.call()

    async def launch(wait: bool) -> bool:
        """Send the call to the next upstream; ``wait``: for a node's budget, if
        need be (a hedge does not)."""
        nonlocal by_deadline
        if deadline - clock() <= 0:
            by_deadline = True
            return False
        ticket: Ticket | None = None
        if admission is None:
            upstream = pool.choose(tried, prefer_archive=prefer_archive, min_block=min_block)
        else:
            got = await admission.acquire(
                pool,
                tried,
                calls=len(calls),
                until=deadline,
                wait=wait,
                prefer_archive=prefer_archive,
                min_block=min_block,
            )
            upstream, ticket = got if got is not None else (None, None)
        if upstream is None:
            return False
        remaining = deadline - clock()
        if remaining <= 0:  # the wait for budget took the rest of the deadline
            if ticket is not None and admission is not None:
                admission.release(ticket)
            by_deadline = True
            return False
        tried.add(upstream.id)
        timeout = min(budget.attempt_timeout_s, remaining)
        pool.started(upstream)
        task = asyncio.ensure_future(transport.post(upstream.url, body, timeout))
        running[task] = (upstream, clock(), timeout, ticket)
        return True

    try:
        while True:
            # a hedge is an extra racer, not one of the failover attempts
            limit = budget.max_attempts + hedged
            if not running and (len(tried) >= limit or not await launch(True)):
                break
            wait: float | None = None
            if hedger is not None and not waited and len(tried) < budget.max_attempts:
                wait = hedger.delay()
            done, _ = await asyncio.wait(running, timeout=wait, return_when=FIRST_COMPLETED)
            if not done:  # the first is slow: race it on the next-best upstream, once
                waited = True
                assert hedger is not None
                if hedger.can_hedge() and await launch(False):
                    hedger.hedged()
                    hedged = True
                continue
            for task in done:
                upstream, start, timeout, ticket = running.pop(task)
                if ticket is not None and admission is not None:
                    admission.release(ticket)
                latency = (clock() - start) * 1000
                try:
                    status, raw = task.result()
                except TransportError as e:
                    if admission is not None and (
                        e.reason == "rate-limited" or e.retry_after is not None
                    ):
                        _throttle(pool, admission, upstream, latency, e.retry_after, e.reason)
                    else:
                        pool.failed(upstream, latency)
                    attempts.append(
                        Attempt(upstream.id, upstream.provider, "hard", e.reason, round(latency))
                    )
                    if e.reason == "timeout" and timeout < budget.attempt_timeout_s:
                        by_deadline = True
                    continue
                except BaseException:  # a closed session, a cancelled post: settle, raise
                    pool.abandoned(upstream, latency)
                    raise
                verdict = assess(status, raw, calls, is_batch=is_batch, tip=tip)
                attempts.append(
                    Attempt(
                        upstream.id,
                        upstream.provider,
                        verdict.verdict,
                        verdict.reason,
                        round(latency),
                    )
                )
                if verdict.verdict == "hard":
                    if admission is not None and verdict.reason == "rate-limited":
                        _throttle(pool, admission, upstream, latency, None, verdict.reason)
                    else:
                        pool.failed(upstream, latency)
                    continue
                pool.succeeded(upstream, latency)  # a soft answer is a healthy node, behind
                if hedger is not None:
                    hedger.observe(latency)
                assert verdict.answers is not None
                if verdict.verdict == "ok":
                    return ForwardResult(
                        "ok", verdict.answers, tuple(attempts), upstream, hedged, len(raw)
                    )
                if pinned and verdict.reason in PIN_MISSES:
                    # the proxy's own pin, not the client's hash: no other node
                    # is tried with it, the caller sends the call again unpinned
                    return ForwardResult(
                        "soft",
                        verdict.answers,
                        tuple(attempts),
                        upstream,
                        hedged,
                        len(raw),
                        pin_missed=True,
                    )
                soft = (verdict.answers, upstream, len(raw))
                prefer_archive = prefer_archive or verdict.prefer_archive
            if by_deadline and not running:
                break
    finally:
        # the other racer, or everything when the flow itself was cancelled
        outraced = hedged and bool(attempts) and attempts[-1].outcome == "ok"
        for task, (upstream, start, _, ticket) in running.items():
            task.cancel()
            if ticket is not None and admission is not None:
                admission.release(ticket)
            if outraced:
                pool.outraced(upstream, (clock() - start) * 1000)
            else:
                pool.abandoned(upstream, (clock() - start) * 1000)

    if soft is not None:
        return ForwardResult("soft", soft[0], tuple(attempts), soft[1], hedged, soft[2])
    # every upstream tried kept silent: a gateway timeout (504), however the time
    # was split between racers and attempts
    if by_deadline or (attempts and all(a.reason == "timeout" for a in attempts)):
        return ForwardResult("deadline", None, tuple(attempts), None, hedged)
    if admission is not None and attempts and all(a.reason == "rate-limited" for a in attempts):
        # every node tried said 429 "too many requests": the nodes' capacity is
        # spent, as when their budgets are; a time to retry, not a 502. (A 503
        # is a node failing, with or without Retry-After: the contract's 502.)
        left = pool.backoff_left(set())
        return ForwardResult(
            "capacity", None, tuple(attempts), None, hedged, retry_after_s=left or 1.0
        )
    if not attempts:
        if admission is not None and admission.shed:
            return ForwardResult(
                "capacity", None, (), None, hedged, retry_after_s=admission.retry_after_s
            )
        return ForwardResult("no-upstream", None, (), None, hedged)
    return ForwardResult("failed", None, tuple(attempts), None, hedged)


def _throttle(
    pool: UpstreamPool,
    admission: Admission,
    upstream: Upstream,
    latency_ms: float,
    retry_after: float | None,
    reason: str,
) -> None:
    """Too many requests: the node pauses (``Retry-After`` or a doubling
    back-off) and, if it has no configured budget, learns one."""
    pool.throttled(upstream, latency_ms, retry_after, reason)
    if reason == "rate-limited":  # a 429 teaches a rate; a 503 only pauses the node
        admission.budgets.rate_limited(upstream.id)


# built once: aiohttp would otherwise turn a dict into a CIMultiDict on every call
_HEADERS = CIMultiDict({"Content-Type": "application/json", "Accept": "application/json"})


class AiohttpTransport:
    """One pooled ClientSession for every upstream call (keep-alive across clients)."""

    def __init__(self, session: aiohttp.ClientSession, *, max_response_bytes: int) -> None:
        self._session = session
        self._max = max_response_bytes

    async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        try:
            async with asyncio.timeout(timeout):
                try:
                    return await self._exchange(url, body)
                except _StaleConnection:
                    # A pooled keep-alive connection the upstream closed just as we
                    # reused it (Node's 5 s keep-alive vs ours): nothing was answered,
                    # the call is a read, so send it again once on a new connection,
                    # as Go's http.Transport does, rather than call the node failed.
                    return await self._exchange(url, body)
        except _StaleConnection:
            raise TransportError("disconnected") from None
        except TimeoutError:
            raise TransportError("timeout") from None
        except aiohttp.ClientConnectorError:
            raise TransportError("connect-error") from None
        except aiohttp.ServerDisconnectedError:
            raise TransportError("disconnected") from None
        except aiohttp.ClientPayloadError:
            raise TransportError("truncated-body") from None
        except aiohttp.ClientError as e:
            raise TransportError(f"client-error:{type(e).__name__}") from None

    async def _exchange(self, url: str, body: bytes) -> tuple[int, bytes]:
        try:
            resp = await self._session.post(url, data=body, headers=_HEADERS, allow_redirects=False)
        except aiohttp.ClientConnectorError:
            raise  # could not connect at all: not a stale connection
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
            raise _StaleConnection() from e
        async with resp:
            if resp.status in (429, 503):
                retry = parse_retry_after(resp.headers.get("Retry-After"), time.time())
                if resp.status == 429 or retry is not None:  # "too many requests"
                    raise TransportError(
                        "rate-limited" if resp.status == 429 else "http-503", retry
                    )
            if (resp.content_length or 0) > self._max:
                raise TransportError("response-too-large")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_any():
                size += len(chunk)
                if size > self._max:
                    raise TransportError("response-too-large")
                chunks.append(chunk)
            return resp.status, b"".join(chunks)


class _StaleConnection(Exception):
    """The connection closed before any answer arrived."""


def new_session() -> aiohttp.ClientSession:
    # Idle connections are dropped after 4 s, before common node servers drop them
    # (Node/chopsticks 5 s): a connection is rarely reused just as the node closes it.
    connector = aiohttp.TCPConnector(
        limit=1024, limit_per_host=256, ttl_dns_cache=300, keepalive_timeout=4.0
    )
    return aiohttp.ClientSession(
        connector=connector,
        # Calls are stateless: an upstream's (or its load balancer's) cookie is
        # neither kept nor sent back, and no jar is consulted on every call.
        cookie_jar=aiohttp.DummyCookieJar(),
        json_serialize=json.dumps,
        auto_decompress=True,
        timeout=aiohttp.ClientTimeout(total=None),
    )
