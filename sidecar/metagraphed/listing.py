"""Metagraphed's list engine over a collection of rows (pure).

Read from Metagraphed's ``workers/list-query.ts`` and ``src/route-query.ts``,
and kept to what its clients rely on:

* **Parameters**: only the route's own; an unknown one, a repeated one, a
  value outside its enum or bounds → ``QueryError`` (400 ``invalid_query``,
  naming the parameter). Enum values match case-insensitively.
* **Filters**: exact (case-insensitive) match on the row's field; a row
  without the field never matches. ``min_F``/``max_F``: inclusive numeric
  bounds (a row whose F is not a number is left out; min above max is an
  error).
* **Sort**: ``sort`` (a field of the route's list) and ``order`` (asc by
  default); rows missing the field go last whatever the order; no ``sort``
  keeps the rows' own order.
* **Pages**: ``cursor`` is a row offset, ``limit`` 1..1000. Without either,
  every row is returned (``limit`` = the total). ``next_cursor`` is null on
  the last page, so following it visits every row once.
* **fields**: a comma list projecting the rows to those fields; a field no
  row has → error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection as Collection_
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Row = dict[str, Any]
MAX_LIMIT = 1000
_INT = re.compile(r"^\d{1,15}$")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
_FIELDS = re.compile(r"^[\s,]*[A-Za-z_][A-Za-z0-9_]*(\s*,[\s,]*[A-Za-z_][A-Za-z0-9_]*)*[\s,]*$")


class QueryError(ValueError):
    """A query the route does not take: 400 ``invalid_query``."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


@dataclass(frozen=True, slots=True)
class Filter:
    """A filter parameter: ``enum`` values, or ``int`` (with ``maximum``), or free ``text``."""

    type: Literal["enum", "int", "text"] = "text"
    values: tuple[str, ...] = ()
    maximum: int | None = None


@dataclass(frozen=True, slots=True)
class Collection:
    """One list route: the data key its rows live under and what it accepts."""

    key: str
    filters: Mapping[str, Filter] = field(default_factory=dict)
    ranges: tuple[str, ...] = ()
    sort: tuple[str, ...] = ()
    # Other parameters the route takes (``window``, ``format``), by their values.
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def parameters(self) -> set[str]:
        names = {"fields", "limit", "cursor", "sort", "order", *self.filters, *self.extra}
        names.update(f"{b}_{r}" for r in self.ranges for b in ("min", "max"))
        return names


@dataclass(frozen=True, slots=True)
class Query:
    filters: Mapping[str, str]
    bounds: tuple[tuple[str, float, bool], ...]  # (field, limit, is_min)
    sort: str | None
    order: Literal["asc", "desc"]
    limit: int | None
    cursor: int | None
    fields: tuple[str, ...] | None
    extra: Mapping[str, str]


def parse_query(pairs: Sequence[tuple[str, str]], coll: Collection) -> Query:
    """The query string's ``(name, value)`` pairs, checked in the caller's order."""
    allowed = coll.parameters()
    values: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            raise QueryError(name, f"{name} is not supported for this route.")
        if name in values:
            raise QueryError(name, f"{name} may only be provided once.")
        values[name] = value
    filters: dict[str, str] = {}
    for name, f in coll.filters.items():
        if name in values:
            filters[name] = _filter_value(name, values[name], f)
    bounds = tuple(_bounds(values, coll.ranges))
    sort = values.get("sort")
    if sort is not None and sort not in coll.sort:
        raise QueryError("sort", f"sort must be one of: {', '.join(coll.sort)}.")
    order = values.get("order", "asc").lower()
    if order not in ("asc", "desc"):
        raise QueryError("order", "order must be one of: asc, desc.")
    limit = _int(values, "limit", 1, MAX_LIMIT)
    cursor = _int(values, "cursor", 0, None)
    fields = _fields(values.get("fields"))
    extra = {}
    for name, allowed_values in coll.extra.items():
        if name in values:
            v = values[name].lower()
            if v not in allowed_values:
                raise QueryError(name, f"{name} must be one of: {', '.join(allowed_values)}.")
            extra[name] = v
    # ``order`` was checked against ("asc", "desc") above: the Literal the field names
    return Query(filters, bounds, sort, order, limit, cursor, fields, extra)  # type: ignore[arg-type]


def _filter_value(name: str, raw: str, f: Filter) -> str:
    if f.type == "enum":
        if raw.lower() not in f.values:
            raise QueryError(name, f"{name} must be one of: {', '.join(f.values)}.")
        return raw.lower()
    if f.type == "int":
        if not _INT.match(raw) or (f.maximum is not None and int(raw) > f.maximum):
            raise QueryError(name, f"{name} must be an integer between 0 and {f.maximum}.")
        return str(int(raw))
    if not raw or len(raw) > 200:
        raise QueryError(name, f"{name} must be 1 to 200 characters.")
    return raw.lower()


def _bounds(values: Mapping[str, str], ranges: Sequence[str]) -> list[tuple[str, float, bool]]:
    out = []
    for r in ranges:
        lo = hi = None
        for is_min, name in ((True, f"min_{r}"), (False, f"max_{r}")):
            if name in values:
                raw = values[name]
                if not _NUMBER.match(raw) or not math.isfinite(float(raw)):
                    raise QueryError(name, f"{name} must be a number.")
                n = float(raw)
                out.append((r, n, is_min))
                lo, hi = (n, hi) if is_min else (lo, n)
        if lo is not None and hi is not None and lo > hi:
            raise QueryError(f"min_{r}", f"min_{r} must not be greater than max_{r}.")
    return out


def _int(values: Mapping[str, str], name: str, lo: int, hi: int | None) -> int | None:
    raw = values.get(name)
    if raw is None or raw == "":
        return None
    if not _INT.match(raw) or int(raw) < lo or (hi is not None and int(raw) > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise QueryError(name, f"{name} must be an integer {bound}.")
    return int(raw)


def _fields(raw: str | None) -> tuple[str, ...] | None:
    if raw is None:
        return None
    if not _FIELDS.match(raw):
        raise QueryError("fields", "fields must be a comma-separated list of field names.")
    return tuple(dict.fromkeys(f.strip() for f in raw.split(",") if f.strip()))


def apply(
    rows: Sequence[Row], q: Query, key: str, fields: Collection_[str] | None = None
) -> tuple[list[Row], Row]:
    """Filter, sort, page and project ``rows``; (the page, ``meta.pagination``).
    ``fields``: what a row may have (its schema's: an empty list takes the
    same projection as a full one), beside the rows' own keys."""
    if q.fields is not None:
        known = {*(fields or ()), *(k for r in rows for k in r)}
        for f in q.fields:
            if f not in known:
                raise QueryError("fields", f"fields: {f} is not a field of {key}.")
    out = [r for r in rows if _matches(r, q)]
    if (field := q.sort) is not None:
        present = [r for r in out if r.get(field) is not None]
        missing = [r for r in out if r.get(field) is None]
        present.sort(key=lambda r: _sort_key(r[field]), reverse=q.order == "desc")
        out = present + missing
    total = len(out)
    paged = q.limit is not None or q.cursor is not None
    limit = q.limit if q.limit is not None else (100 if paged else total)
    cursor = min(q.cursor or 0, total)
    page = out[cursor : cursor + limit] if paged else out
    nxt = cursor + limit
    if q.fields is not None:
        page = [{f: r[f] for f in q.fields if f in r} for r in page]
    pagination = {
        "collection": key,
        "total": total,
        "returned": len(page),
        "limit": limit,
        "cursor": cursor,
        "next_cursor": nxt if paged and nxt < total else None,
        "sort": q.sort,
        "order": q.order if q.sort else "asc",
    }
    return page, pagination


def _matches(row: Row, q: Query) -> bool:
    for name, wanted in q.filters.items():
        value = row.get(name)
        if value is None:
            return False
        if isinstance(value, bool):
            value = "true" if value else "false"
        if str(value).lower() != wanted:
            return False
    for name, limit, is_min in q.bounds:
        value = row.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if (value < limit) if is_min else (value > limit):
            return False
    return True


def _sort_key(value: Any) -> tuple[int, Any]:
    # Numbers before text, so a mixed column still sorts (never raises).
    if isinstance(value, bool):
        return (0, int(value))
    if isinstance(value, int | float):
        return (0, value)
    return (1, str(value))


def link_header(url: str, pagination: Row) -> str | None:
    """RFC 8288 ``Link`` for a page (first/prev, next/last), as Metagraphed sends it;
    None when there is no other page."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    cursor, limit, nxt, total = (
        pagination["cursor"],
        pagination["limit"],
        pagination["next_cursor"],
        pagination["total"],
    )
    if not limit:
        return None
    parts = urlsplit(url)
    base = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("cursor", "limit")]

    def page(offset: int) -> str:
        query = urlencode([*base, ("cursor", str(offset)), ("limit", str(limit))])
        return urlunsplit(parts._replace(query=query))

    links = []
    if cursor > 0:
        links += [(page(0), "first"), (page(max(0, cursor - limit)), "prev")]
    if nxt is not None:
        links += [(page(nxt), "next"), (page((total - 1) // limit * limit), "last")]
    return ", ".join(f'<{u}>; rel="{rel}"' for u, rel in links) or None
