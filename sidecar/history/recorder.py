"""The Prober's side of the probe history: every probe result is folded into
its endpoint's current minute (with the node's lag at that moment), and the
minutes are written to the store when a new minute starts and before every read.

``recording(probe, …)`` wraps the Prober's probe function, so the Prober
itself does not change: what a probe returns is what the history keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from common.config import Config, Endpoint
from sidecar.history.series import KEEP_S, Minute, lag_of
from sidecar.history.store import HistoryStore
from sidecar.probing.health import Health
from sidecar.probing.prober import ProbeFn
from sidecar.probing.results import ProbeKind, ProbeResult


class HistoryRecorder:
    def __init__(self, config: Config, store: HistoryStore | None) -> None:
        self.config = config
        self.store = store
        self._pending: dict[tuple[str, int], Minute] = {}
        self._minute: int | None = None

    def observe(self, e: Endpoint, result: ProbeResult, health: Mapping[str, Health]) -> None:
        minute = int(result.at // 60)
        lag = lag_of(result, e, self.config.endpoints, health)
        self._pending.setdefault((e.id, minute), Minute()).add(result.ok, result.latency_ms, lag)
        if self._minute is not None and minute != self._minute:
            self.flush(result.at)
        self._minute = minute

    def flush(self, now: float) -> None:
        if self.store is None or not self._pending:
            return
        pending, self._pending = self._pending, {}
        self.store.add(pending, now)

    def minutes(
        self, endpoint_ids: Sequence[str], now: float, span_s: float = KEEP_S
    ) -> dict[str, dict[int, Minute]]:
        """Each endpoint's minutes over the last ``span_s`` (stored and pending)."""
        self.flush(now)
        since = int((now - span_s) // 60)
        if self.store is None:
            return {eid: {} for eid in endpoint_ids}
        return self.store.minutes(endpoint_ids, since)

    def recording(self, probe: ProbeFn, health: Callable[[], Mapping[str, Health]]) -> ProbeFn:
        """``probe``, keeping what it returns in the history."""

        async def run(e: Endpoint, kind: ProbeKind) -> ProbeResult:
            result = await probe(e, kind)
            self.observe(e, result, health())
            return result

        return run
