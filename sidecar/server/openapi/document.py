"""The OpenAPI 3.1 document served at ``GET /api/v1/openapi.json``, assembled
from its parts (pure data; what the document promises: the package's docstring)."""

from __future__ import annotations

import copy
import functools

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
