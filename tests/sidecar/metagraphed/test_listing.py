"""The pure parts of the Metagraphed API: the list engine and the vocabulary."""

from __future__ import annotations

import pytest

from sidecar.metagraphed import vocab
from sidecar.metagraphed.envelope import error, none_match, success
from sidecar.metagraphed.listing import (
    Collection,
    Filter,
    QueryError,
    apply,
    link_header,
    parse_query,
)
from sidecar.probing.health import Health

COLL = Collection(
    "things",
    {"kind": Filter("enum", ("a", "b")), "netuid": Filter("int", maximum=65535), "who": Filter()},
    ("latency_ms",),
    ("latency_ms", "who"),
)
ROWS = [
    {"id": i, "kind": "ab"[i % 2], "netuid": i // 3, "who": f"P{i % 3}", "latency_ms": lat}
    for i, lat in enumerate([30, None, 10, 50, 20, 40, 5])
]


def run(query: str) -> tuple[list[dict], dict]:
    pairs = [tuple(p.split("=", 1)) for p in query.split("&") if p]
    return apply(ROWS, parse_query(pairs, COLL), COLL.key)  # type: ignore[arg-type]


def test_limit_2_pages_visit_every_row_exactly_once() -> None:
    seen, cursor, pages = [], None, 0
    while True:
        rows, pg = run("limit=2" + (f"&cursor={cursor}" if cursor is not None else ""))
        seen += [r["id"] for r in rows]
        pages += 1
        assert pg["collection"] == "things" and pg["total"] == 7 and pg["limit"] == 2
        assert pg["returned"] == len(rows)
        cursor = pg["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == list(range(7)) and len(seen) == 7 and pages == 4


def test_without_limit_every_row_and_no_next_cursor() -> None:
    rows, pg = run("")
    assert len(rows) == 7 and pg["limit"] == 7 and pg["next_cursor"] is None


def test_filters_sort_ranges_and_fields() -> None:
    rows, pg = run("kind=A&sort=latency_ms&order=desc")  # enum values match in any case
    assert [r["id"] for r in rows] == [0, 4, 2, 6] and pg["sort"] == "latency_ms"
    rows, _ = run("sort=latency_ms")  # the row without a latency goes last
    assert rows[-1]["id"] == 1 and rows[0]["id"] == 6
    rows, _ = run("min_latency_ms=20&max_latency_ms=40")
    assert {r["id"] for r in rows} == {0, 4, 5}
    rows, _ = run("who=p1&netuid=0")
    assert [r["id"] for r in rows] == [1]
    rows, _ = run("fields=id,who&limit=1")
    assert rows == [{"id": 0, "who": "P0"}]


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("kind=c", "kind"),
        ("netuid=70000", "netuid"),
        ("netuid=-1", "netuid"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=x", "limit"),
        ("cursor=-2", "cursor"),
        ("sort=id", "sort"),
        ("order=up", "order"),
        ("bogus=1", "bogus"),
        ("limit=1&limit=2", "limit"),
        ("min_latency_ms=9&max_latency_ms=2", "min_latency_ms"),
        ("min_latency_ms=abc", "min_latency_ms"),
        ("fields=id,nothere", "fields"),
        ("fields=1x", "fields"),
    ],
)
def test_bad_queries_name_their_parameter(query: str, parameter: str) -> None:
    with pytest.raises(QueryError) as e:
        run(query)
    assert e.value.parameter == parameter


def test_link_header_names_the_other_pages() -> None:
    _, pg = run("limit=2&cursor=2")
    link = link_header("/api/v1/things?limit=2&cursor=2&kind=a", pg)
    assert link is not None
    assert '</api/v1/things?kind=a&cursor=0&limit=2>; rel="first"' in link
    assert 'cursor=4&limit=2>; rel="next"' in link and 'cursor=6&limit=2>; rel="last"' in link
    _, pg = run("")
    assert link_header("/x", pg) is None


def test_envelopes_etag_and_304() -> None:
    a = success({"x": 1})
    headers = dict(a.headers)
    assert a.status == 200 and headers["ETag"].startswith('W/"')
    assert headers["Access-Control-Allow-Origin"] == "*"
    assert success({"x": 1}, if_none_match=headers["ETag"]).status == 304
    assert success({"x": 1}, if_none_match=headers["ETag"].removeprefix("W/")).status == 304
    assert success({"x": 2}, if_none_match=headers["ETag"]).status == 200
    assert none_match("*", 'W/"a"') and none_match('"b", W/"a"', 'W/"a"')
    # the time a document was made is not a change of it: a second later, still a 304
    now = success(
        {"generated_at": "2026-11-29T01:00:00Z", "items": [1]},
        meta={"generated_at": "2026-11-29T01:00:00Z", "source": "chainproxy"},
    )
    etag = dict(now.headers)["ETag"]
    later = {"generated_at": "2026-11-29T01:00:01Z", "items": [1]}
    meta = {"generated_at": "2026-11-29T01:00:01Z", "source": "chainproxy"}
    assert success(later, meta=meta, if_none_match=etag).status == 304  # meta's time too
    assert success({**later, "observed_at": "x"}, meta=meta, if_none_match=etag).status == 304
    assert success({**later, "items": [2]}, meta=meta, if_none_match=etag).status == 200
    assert success(later, meta={**meta, "source": "x"}, if_none_match=etag).status == 200
    assert b"2026-11-29T01:00:01Z" in success(later).body  # the body keeps its time
    e = error(400, "invalid_query", "bad", meta={"parameter": "p"})
    assert e.status == 400 and dict(e.headers)["X-Metagraph-Error-Code"] == "invalid_query"
    assert b'"ok":false' in e.body and b'"code":"invalid_query"' in e.body


def test_vocabulary() -> None:
    assert vocab.kind("node-rpc") == "subtensor-rpc" and vocab.kind("node-wss") == "subtensor-wss"
    assert vocab.classification("bad-response") == "content-mismatch"
    assert vocab.classification("http-503") == "transient"
    assert vocab.classification("http-403") == "auth-required"
    assert vocab.classification("http-404") == "unsupported"
    assert vocab.classification("probe-error") == "unknown"
    assert vocab.status(Health()) == "unknown"
    ok = Health(status="OK", classification="live", last_probe_at=1.0)
    assert vocab.status(ok) == "ok"
    assert vocab.status(Health(status="OK", classification="dead", last_probe_at=1.0)) == "degraded"
    assert (
        vocab.status(Health(status="Degraded", classification="dead", last_probe_at=1)) == "failed"
    )
    slow = Health(status="Degraded", classification="timeout", last_probe_at=1.0)
    assert vocab.status(slow) == "degraded"
    assert vocab.rollup(["ok", "failed"]) == "degraded" and vocab.rollup(["failed"]) == "failed"
    assert vocab.rollup(["unknown"]) == "unknown" and vocab.rollup(["ok", "unknown"]) == "ok"
    assert vocab.provider_slugs(["Data_Co", "data.co", "b"]) == {
        "Data_Co": "data-co",
        "b": "b",
        "data.co": "data-co-2",
    }
