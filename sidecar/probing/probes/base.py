"""The frame every probe runs in: one deadline, no exception escapes, partial
results kept."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass

import aiohttp

from common.config import Endpoint
from sidecar.probing.probes.classify import classify_exception, describe_exception, safe_detail
from sidecar.probing.results import TIMEOUT, UNKNOWN, ProbeKind, ProbeResult

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class ProbeCall:
    """One probe to run, what every probe takes: the endpoint, the shared
    session, the deadline of the whole probe, the kind (a data-artifact or sse
    endpoint's "head" probe is its full probe), an injected clock, and the
    network's genesis (only node endpoints' full probes check it)."""

    endpoint: Endpoint
    session: aiohttp.ClientSession
    _: KW_ONLY
    timeout_s: float
    kind: ProbeKind = "full"
    clock: Clock = time.time
    genesis: str | None = None


@dataclass(slots=True)
class Observation:
    """What a probe has learned so far; a probe body fills it in as it goes, so a
    later failure (e.g. a timeout on the second request) still reports the
    latency and heights already seen."""

    latency_ms: int | None = None
    best: int | None = None
    finalized: int | None = None
    archive: bool | None = None
    spec_name: str | None = None  # the best block's runtime, when the probe read it
    spec_version: int | None = None
    classification: str | None = None  # set once the verdict is known
    detail: str = ""

    def finish(self, classification: str, detail: str) -> None:
        self.classification = classification
        self.detail = detail


ProbeBody = Callable[[Observation], Awaitable[None]]


def elapsed_ms(started: float) -> int:
    """Milliseconds since ``started`` (a ``time.monotonic()`` value)."""
    return max(0, round((time.monotonic() - started) * 1000))


async def run_probe(call: ProbeCall, body: ProbeBody) -> ProbeResult:
    """Run ``body`` under the call's ``timeout_s`` deadline and turn whatever
    happens into a ``ProbeResult``. Only ``asyncio.CancelledError`` (the
    caller's own cancellation) propagates."""
    endpoint, timeout_s = call.endpoint, call.timeout_s
    at = call.clock()
    obs = Observation()
    try:
        async with asyncio.timeout(timeout_s):
            await body(obs)
    except Exception as exc:  # the probe must never raise: every failure is a verdict
        # A verdict reached before the failure stands: e.g. only the clean-up
        # (a WebSocket close) overran the deadline.
        if obs.classification is None:
            if isinstance(exc, TimeoutError):
                obs.finish(TIMEOUT, f"no answer within {timeout_s:g} s")
            else:
                obs.finish(classify_exception(exc), describe_exception(exc))
    if obs.classification is None:  # a body that returned without a verdict: a bug
        obs.finish(UNKNOWN, "probe ended without a verdict")
    return ProbeResult(
        endpoint_id=endpoint.id,
        at=at,
        kind=call.kind,
        classification=obs.classification or UNKNOWN,
        latency_ms=obs.latency_ms,
        best=obs.best,
        finalized=obs.finalized,
        archive=obs.archive,
        detail=safe_detail(obs.detail, endpoint.url),
        spec_name=obs.spec_name,
        spec_version=obs.spec_version,
    )
