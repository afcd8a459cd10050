"""Probe of a data-artifact endpoint: a GET that reads only the start of the body."""

from __future__ import annotations

import time

from sidecar.probing.probes.base import Observation, ProbeCall, elapsed_ms, run_probe
from sidecar.probing.probes.classify import ProbeFailure, raise_for_status
from sidecar.probing.results import BAD_RESPONSE, LIVE, ProbeResult

# Enough to see the body flow (and catch a cut-off); artifacts can be gigabytes.
ARTIFACT_READ_LIMIT = 1_048_576
_READ_CHUNK = 65_536


async def probe_artifact(call: ProbeCall, *, read_limit: int = ARTIFACT_READ_LIMIT) -> ProbeResult:
    """``live`` on 2xx/3xx (redirects are reported, not followed); ``detail`` has the
    status and the size (Content-Length when sent)."""

    async def body(obs: Observation) -> None:
        started = time.monotonic()
        # identity: Content-Length is then the artifact's real size
        headers = {"Accept-Encoding": "identity"}
        get = call.session.get(call.endpoint.url, allow_redirects=False, headers=headers)
        async with get as resp:
            obs.latency_ms = elapsed_ms(started)
            status = resp.status
            raise_for_status(status)
            if not 200 <= status < 400:
                raise ProbeFailure(BAD_RESPONSE, f"HTTP {status}")
            if status >= 300:
                resp.close()  # the redirect's body is of no interest
                obs.finish(LIVE, f"HTTP {status} (redirect, not followed)")
                return
            read = 0
            while read < read_limit:
                chunk = await resp.content.read(min(_READ_CHUNK, read_limit - read))
                if not chunk:
                    break
                read += len(chunk)
            complete = resp.content.at_eof()
            if not complete:
                resp.close()  # drop the connection rather than download the rest
        length = resp.content_length
        if length is not None:
            size = f"{length} bytes"
        else:
            size = f"{read} bytes" if complete else f"over {read} bytes"
        obs.finish(LIVE, f"HTTP {status}, {size}")

    return await run_probe(call, body)
