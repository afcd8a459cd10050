"""The document's operational part: the Error body every path may answer,
liveness, metrics, the dashboard and this document itself."""

from __future__ import annotations

from sidecar.openapi.schema import Schema, arr, content, enum, get, integer, obj, param, ref, string


def schemas() -> dict[str, Schema]:
    return {
        "Error": obj(
            {"error": obj({"code": integer(400), "message": string()})},
            "Every error answer (4xx/5xx) of the sidecar.",
        ),
        "Healthz": obj(
            {
                "status": enum("ok"),
                "uptime_s": {"type": "number", "minimum": 0},
                "networks": arr(string()),
                "endpoints": integer(),
                "probes_run": integer(),
            }
        ),
    }


def paths() -> dict[str, Schema]:
    page = param("query", "page", {"type": "integer", "minimum": 1})
    return {
        "/healthz": get("Liveness", ref("Healthz")),
        "/api/v1/openapi.json": get(
            "This document", {"type": "object", "description": "OpenAPI 3.1"}
        ),
        "/": {
            "get": {
                "summary": "The dashboard (server-rendered HTML; ?page=N pages the callable list)",
                "parameters": [page],
                "responses": {"200": content({"type": "string"}, "HTML page", "text/html")},
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "responses": {
                    "200": content(
                        {"type": "string"},
                        "Prometheus text exposition format 0.0.4",
                        "text/plain",
                    )
                },
            }
        },
    }
