"""Between the usage statistics' values and the rows of the usage tables (pure).

* Stored histograms: ``hist_json`` writes one as a flat JSON array,
  ``parse_hist`` reads it back, ``hist_merge`` is the SQLite function the
  upserts call to merge two of them.
* ``batch_rows``: a validated batch merged per table key, ready for
  ``executemany`` (so the transaction does nothing but write), and what it
  adds to the in-memory window totals once committed.
* ``read_totals``: window totals from the rows of a count and a histogram query.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from common.latency_hist import Hist
from common.usage_wire import Counts
from sidecar.usage.stats.batch import Batch
from sidecar.usage.stats.window import WindowTotals

log = logging.getLogger("chainproxy.sidecar.usage")

_encode = json.JSONEncoder(separators=(",", ":")).encode


def hist_json(hist: Hist) -> str:
    """The stored form of a histogram: a flat JSON array ``[bucket, count, …]`` in
    bucket order (``[195,4,230,6]``): compact, and twice as fast to read back
    as the wire's ``{"195":4,"230":6}``."""
    return _encode([x for b, n in sorted(hist.items()) if n for x in (b, n)])


def parse_hist(text: str | None, into: Hist) -> None:
    """Add the stored histogram ``text`` to ``into``; ``ValueError`` (or
    ``TypeError``) when it is not one."""
    flat = json.loads(text or "[]")
    if type(flat) is not list or len(flat) % 2:
        raise ValueError("not a flat [bucket, count, ...] array")
    it = iter(flat)
    for b, n in zip(it, it, strict=True):
        into[b] = into.get(b, 0) + n


def hist_merge(a: str | None, b: str | None) -> str:
    """SQLite function: the merge of two stored histograms. An unreadable stored
    value is logged and replaced rather than blocking every later ingest."""
    out: Hist = {}
    for text in (a, b):
        try:
            parse_hist(text, out)
        except (ValueError, TypeError, AttributeError) as e:
            log.warning("dropping an unreadable stored latency histogram: %s", e)
    return hist_json(out)


def _add(into: Hist, hist: Hist) -> None:
    # common.latency_hist.merge_into also takes the wire's string buckets and
    # converts every key; validated rollups have int buckets, and this is the
    # ingest's hot loop.
    for b, n in hist.items():
        into[b] = into.get(b, 0) + n


@dataclass(slots=True)
class BatchRows:
    """A batch merged per key of each table (rollups older than the window and
    empty ones left out: ``stored`` counts the others)."""

    stored: int = 0
    # (minute, network, endpoint or '', method) -> [requests, errors, failovers,
    # cache_hits, latency_ms_sum, hist]
    minutes: dict[tuple[int, str, str, str], list[Any]] = field(default_factory=dict)
    hours: dict[tuple[int, str, str], Counts] = field(default_factory=dict)
    minute_hists: dict[tuple[int, str], Hist] = field(default_factory=dict)
    hour_hists: dict[tuple[int, str], Hist] = field(default_factory=dict)
    # (hour, network, method) -> [requests, units]
    method_hours: dict[tuple[int, str, str], list[int]] = field(default_factory=dict)

    def minute_rows(self) -> list[tuple[Any, ...]]:
        """For ``UPSERT_MINUTE``."""
        return [(*k, *v[:5], hist_json(v[5])) for k, v in self.minutes.items()]

    def hour_rows(self) -> list[tuple[Any, ...]]:
        """For ``UPSERT_HOUR``."""
        return [
            (*k, c.requests, c.errors, c.failovers, c.cache_hits, c.latency_ms_sum)
            for k, c in self.hours.items()
        ]

    def method_hour_rows(self) -> list[tuple[Any, ...]]:
        """For ``UPSERT_METHOD_HOUR``."""
        return [(*k, *v) for k, v in self.method_hours.items()]

    def minute_hist_rows(self) -> list[tuple[Any, ...]]:
        """For ``UPSERT_HIST_MINUTE``."""
        return [(*k, hist_json(h)) for k, h in self.minute_hists.items()]

    def hour_hist_rows(self) -> list[tuple[Any, ...]]:
        """For ``UPSERT_HIST_HOUR``: one row per bucket."""
        return [(*k, b, n) for k, h in self.hour_hists.items() for b, n in h.items()]

    def add_to(self, totals: WindowTotals) -> None:
        """Add what was stored to the in-memory window totals."""
        for (_hour, net, ep), c in self.hours.items():
            totals.add_counts(net, ep, c)
        for (_minute, net), h in self.minute_hists.items():
            totals.add_hist(net, h)


def batch_rows(batch: Batch, start: int, end: int | None = None) -> BatchRows:
    """The rows of ``batch``; rollups before the minute ``start`` (the window's
    first) are dropped, and one after the minute ``end`` (the sidecar's own:
    a proxy whose clock runs ahead, within ``FUTURE_TOLERANCE_S``) is counted
    at ``end``, so no figure has an hour that has not begun."""
    out = BatchRows()
    minutes, hours, minute_hists = out.minutes, out.hours, out.minute_hists
    method_hours = out.method_hours
    for r in batch.rollups:
        if r.minute < start:
            continue
        if end is not None and r.minute > end:
            r = replace(r, minute=end)
        hour = r.minute // 60
        m = method_hours.get((hour, r.network, r.method))
        if m is None:
            method_hours[(hour, r.network, r.method)] = [r.requests, r.units]
        else:
            m[0] += r.requests
            m[1] += r.units
        if not r.requests:  # units charged after a call's record: its method's units only
            continue
        out.stored += 1
        key = r.key
        row = minutes.get(key)
        if row is None:
            minutes[key] = [r.requests, r.errors, r.failovers, r.cache_hits,
                            r.latency_ms_sum, dict(r.hist)]  # fmt: skip
        else:
            row[0] += r.requests
            row[1] += r.errors
            row[2] += r.failovers
            row[3] += r.cache_hits
            row[4] += r.latency_ms_sum
            _add(row[5], r.hist)
        c = hours.get((hour, r.network, key[2]))
        if c is None:
            c = hours[(hour, r.network, key[2])] = Counts()
        c.add(r)
        _add(minute_hists.setdefault((r.minute, r.network), {}), r.hist)
    for (minute, net), h in minute_hists.items():
        _add(out.hour_hists.setdefault((minute // 60, net), {}), h)
    return out


def read_totals(counts: Iterable[Any], hists: Iterable[Any]) -> WindowTotals:
    """Totals from rows ``(network, endpoint, requests, errors, failovers,
    cache_hits, latency_ms_sum)`` and ``(network, stored histogram)``; an
    unreadable histogram is skipped with a log line."""
    out = WindowTotals()
    for net, ep, req, err, fo, ch, lsum in counts:
        out.counts[(net, ep)] = Counts(req, err, fo, ch, lsum)
    for net, text in hists:
        try:
            parse_hist(text, out.hists.setdefault(net, {}))
        except (ValueError, TypeError, AttributeError) as e:
            log.warning("skipping an unreadable stored latency histogram: %s", e)
    return out
