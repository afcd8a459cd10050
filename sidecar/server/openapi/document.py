"""The OpenAPI 3.1 document served at ``GET /api/v1/openapi.json``, assembled
from its parts (pure data; what the document promises: the package's docstring)."""

from __future__ import annotations

import copy
import functools

from sidecar.metagraphed.listing import Collection
from sidecar.server.openapi import (
    endpoint,
    incidents,
    metagraphed,
    metagraphed_stats,
    networks,
    ops,
    registry,
    usage,
)
from sidecar.server.openapi.schema import Schema

_PARTS = (ops, usage, registry, incidents, endpoint, networks, metagraphed, metagraphed_stats)


@functools.cache
def _document() -> Schema:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "chainproxy sidecar",
            "version": "1.0.0",
            "description": (
                "Read-only JSON API of the chainproxy registry, probes, incidents and usage "
                "statistics. Every path answers GET only (other methods: 405 with the Error "
                "body); times are UTC ISO-8601, latencies integer milliseconds, percentages "
                "0-100. Endpoint URLs are shown with secrets redacted."
            ),
        },
        "servers": [{"url": "/"}],
        "paths": {path: op for part in _PARTS for path, op in part.paths().items()},
        "components": {
            "schemas": {name: s for part in _PARTS for name, s in part.schemas().items()}
        },
    }


def openapi_document() -> Schema:
    """The document (a fresh copy: callers may change it)."""
    return copy.deepcopy(_document())


def row_fields(coll: Collection) -> frozenset[str] | None:
    """The fields a Metagraphed list route's rows have, from its schema: what
    ``fields=`` may name, whether or not the page has rows (checked against
    the rows present, a projection of an empty list was a 400 that became a
    200 once there were rows). None: a collection no route lists."""
    return _row_fields().get(id(coll))


@functools.cache
def _row_fields() -> dict[int, frozenset[str]]:
    schemas = _document()["components"]["schemas"]
    out: dict[int, frozenset[str]] = {}
    for _path, _summary, name, coll in metagraphed.OPS:
        if coll is None:
            continue
        items = schemas[name]["properties"][coll.key]["items"]
        while "$ref" in items:
            items = schemas[items["$ref"].rsplit("/", 1)[1]]
        out[id(coll)] = frozenset(items["properties"])
    return out
