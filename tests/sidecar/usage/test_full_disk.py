"""The sidecar's usage and probe stores on a full disk: a real tmpfs filled up
(``tests.tmpfs``; skipped where mounting is not permitted). Ingest fails as
``StoreUnavailable`` (the API's JSON 503 with ``Retry-After``), logged once;
reads keep being served; once space is back the retried batch counts once."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.probing.store import Store
from sidecar.server.app_keys import USAGE_KEY
from sidecar.usage.store import StoreUnavailable, UsageStore
from tests.fakes import FakeClock
from tests.sidecar.helpers import probe_result
from tests.sidecar.usage.helpers import (
    EP_A,
    MINUTE,
    NOW,
    URL,
    batch,
    get_usage,
    r,
    usage_client,
    usage_config,
    wire_batch,
)
from tests.sidecar.usage.stats.helpers import wire_rollup
from tests.tmpfs import fill, tmpfs


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "2m") as d:
        yield d


def lines(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in rec.getMessage() for rec in caplog.records)


def test_a_full_disk_refuses_ingest_keeps_reads_and_a_retry_counts_once(
    disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = UsageStore(disk / "usage.sqlite3")
    store.ingest(batch(r(n=1)), NOW)
    filler = fill(disk)
    refused = [batch(r(n=2)) for _ in range(20)]
    for b in refused:
        with pytest.raises(StoreUnavailable, match="full"):
            store.ingest(b, NOW)
    assert store.errors == 20
    assert lines(caplog, "until it works") == 1  # once, not once per batch
    assert store.window_totals(NOW).counts[("finney", EP_A)].requests == 1  # reads served
    assert store.hourly_requests(NOW) == [(int(NOW) // 3600, 1)]

    filler.unlink()
    for b in refused:  # the proxy's retries
        assert store.ingest(b, NOW).duplicate is False
    assert lines(caplog, "usage store works again (20 failed operations") == 1
    assert all(store.ingest(b, NOW).duplicate for b in refused)  # and a second time
    assert store.window_totals(NOW).counts[("finney", EP_A)].requests == 1 + 40
    assert store.rebuild_totals(NOW).counts[("finney", EP_A)].requests == 41  # on disk too
    store.close()


async def test_the_api_answers_503_to_ingest_and_serves_reads_on_a_full_disk(
    aiohttp_client: Any, disk: Path
) -> None:
    config = usage_config(disk)
    client = await usage_client(aiohttp_client, config, FakeClock(NOW))
    first = wire_batch([wire_rollup(MINUTE, [10] * 3, endpoint=None)])
    assert (await client.post(URL, json=first)).status == 200
    filler = fill(disk)

    doc = wire_batch([wire_rollup(MINUTE, [10] * 4, endpoint=None)])
    for _ in range(3):
        resp = await client.post(URL, json=doc)
        assert resp.status == 503 and resp.headers["Retry-After"] == "10"
        assert resp.content_type == "application/json"
        body = await resp.json()
        assert body["error"]["code"] == 503 and "full" in body["error"]["message"]
    assert (await get_usage(client))["requests"] == 3
    for path in ("/", "/healthz", "/metrics", "/api/v1/registry/totals", "/api/v1/incidents"):
        assert (await client.get(path)).status == 200, path
    svc = client.app[USAGE_KEY]
    assert svc.batches_failed == 3 and svc.batches_accepted == 1

    filler.unlink()
    assert (await (await client.post(URL, json=doc)).json())["duplicate"] is False
    assert (await (await client.post(URL, json=doc)).json())["duplicate"] is True
    assert (await get_usage(client))["requests"] == 3 + 4


@pytest.fixture(autouse=True)
def _usage_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="chainproxy.sidecar")


def test_the_probe_store_on_a_full_disk_logs_once_and_keeps_probing(
    disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store(disk / "sidecar.sqlite3")
    store.record([probe_result(EP_A, NOW)], {}, NOW)
    filler = fill(disk)
    for i in range(10):
        store.record([probe_result(EP_A, NOW + i)], {}, NOW + i)  # never raises
    assert store.errors == 10 and store.probe_count() == 1
    assert lines(caplog, "probe store write failed") == 1
    filler.unlink()
    store.record([probe_result(EP_A, NOW + 20)], {}, NOW + 20)
    assert store.probe_count() == 2
    assert lines(caplog, "probe store works again (10 failed operations") == 1
    store.close()
