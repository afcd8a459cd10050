"""The document's operational part: the Error body every path may answer,
liveness, metrics, the dashboard and this document itself."""

from __future__ import annotations

from sidecar.server.openapi import schema as js
from sidecar.server.openapi.schema import Schema


def schemas() -> dict[str, Schema]:
    return {
        "Error": js.obj(
            {"error": js.obj({"code": js.integer(400), "message": js.string()})},
            "Every error answer (4xx/5xx) of the sidecar.",
        ),
        "Healthz": js.obj(
            {
                "status": js.enum("ok"),
                "uptime_s": {"type": "number", "minimum": 0},
                "networks": js.arr(js.string()),
                "endpoints": js.integer(),
                "probes_run": js.integer(),
            }
        ),
    }


def paths() -> dict[str, Schema]:
    page = js.param("query", "page", {"type": "integer", "minimum": 1})
    network = js.param(
        "query", "network", {"type": "string"}, "one of the configured networks; absent: all"
    )
    html_error = js.content({"type": "string"}, "an HTML error page", "text/html")
    return {
        "/healthz": js.get("Liveness", js.ref("Healthz")),
        "/api/v1/openapi.json": js.get(
            "This document", {"type": "object", "description": "OpenAPI 3.1"}
        ),
        "/": {
            "get": {
                "summary": "The dashboard (server-rendered HTML; ?page=N pages the callable list,"
                " ?network= shows one network)",
                "parameters": [page, network],
                "responses": {
                    "200": js.content({"type": "string"}, "HTML page", "text/html"),
                    "400": {**html_error, "description": "a page that is not a whole number >= 1"},
                    "404": {**html_error, "description": "an unknown network, a page past the end"},
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "responses": {
                    "200": js.content(
                        {"type": "string"},
                        "Prometheus text exposition format 0.0.4",
                        "text/plain",
                    )
                },
            }
        },
    }
