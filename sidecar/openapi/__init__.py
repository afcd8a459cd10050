"""The OpenAPI 3.1 document served at ``GET /api/v1/openapi.json`` (pure data).

It describes every public path of the sidecar (the internal ``/api/v1/internal/``
paths used by the addon are not public and are left out). Schemas are JSON
Schema 2020-12 (OpenAPI 3.1), so a client, or a test, can validate answers
with any JSON Schema validator. Objects list every field they have; fields are
not removed or renamed within ``/api/v1``, new ones may be added.

The document is assembled from one module per part of the API, each giving
its component ``schemas()`` and its ``paths()``: ``ops`` (Error, liveness,
metrics, dashboard, this document), ``usage``, ``registry``, ``incidents`` and
``endpoint``; ``schema`` has the builders they share. When adding a path to
the sidecar (``sidecar.routes``), add it to its part too: a test compares the
app's routes with this document.
"""

from __future__ import annotations

import copy
import functools

from sidecar.openapi import endpoint, incidents, ops, registry, usage
from sidecar.openapi.schema import Schema

_PARTS = (ops, usage, registry, incidents, endpoint)


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
