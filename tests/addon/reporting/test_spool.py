"""The usage spool on disk (order, bound, reopen) and the memory backlog beside it."""

from __future__ import annotations

from pathlib import Path

from addon.reporting.spool import Backlog
from addon.reporting.usage import Spool, new_batch


def test_spool_keeps_order_bound_and_survives_reopen(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool", max_batches=3)
    batches = [new_batch([{"requests": i}], float(i)) for i in range(5)]
    for b in batches:
        spool.append(b)
    assert len(spool) == 3 and spool.dropped == 2  # oldest two dropped, counted
    again = Spool(tmp_path / "spool", max_batches=3)  # a restarted process
    assert [b["batch_id"] for _, b in again.oldest(10)] == [b["batch_id"] for b in batches[2:]]
    again.remove(batches[2]["batch_id"])
    assert [k for k, _ in spool.oldest(10)] == [b["batch_id"] for b in batches[3:]]


def test_backlog_keeps_order_and_its_bound() -> None:
    b = Backlog(2)
    batches = [new_batch([{"requests": i}], float(i)) for i in range(1, 4)]
    assert b.push(batches[0]) is None and b.push(batches[1]) is None
    assert b.push(batches[2]) is batches[0]
    assert (b.dropped, b.dropped_calls, b.calls()) == (1, 1, 5)
    assert b.first() is batches[1]
    b.remove(batches[1])
    b.remove(batches[1])  # gone already: no error
    assert list(b) == [batches[2]]
