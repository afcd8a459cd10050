"""The document's incidents part: the list and the 24 h timeline
(``sidecar.incidents.tracker``, ``sidecar.registry.documents``). ``Incident`` is also used by the
endpoint part."""

from __future__ import annotations

from sidecar.server.openapi import schema as js
from sidecar.server.openapi.schema import Schema


def schemas() -> dict[str, Schema]:
    return {
        "Incident": js.obj(
            {
                "severity": js.enum("Degraded", "Down"),
                "endpoint": js.ENDPOINT_ID,
                "state": js.enum("ongoing", "resolved"),
                "started": js.ISO,
                "ended": js.nullable(js.ISO, "string"),
                "duration": js.string("e.g. 2h 05m", pattern=r"^[0-9]+h [0-5][0-9]m$"),
                "message": js.string("the failure classification, e.g. dead, timeout, http-503"),
            }
        ),
        "Incidents": js.obj(
            {
                "hosts": js.integer(desc="distinct hosts among the incidents listed"),
                "incidents": js.arr(js.ref("Incident")),
            },
            "Ongoing incidents and those resolved in the last 7 days, newest first (<= 200).",
        ),
        "IncidentTimeline": js.obj(
            {
                "endpoints": js.arr(
                    js.obj(
                        {"endpoint": js.ENDPOINT_ID, "ongoing": js.integer(), "total": js.integer()}
                    )
                ),
                "hosts": js.arr(
                    js.obj(
                        {
                            "host": js.string(),
                            "ongoing": js.integer(),
                            "total": js.integer(),
                            "links": js.arr(js.ENDPOINT_ID),
                        }
                    )
                ),
            },
            "Incidents of the last 24 h per endpoint and per host.",
        ),
    }


def paths() -> dict[str, Schema]:
    return {
        "/api/v1/incidents": js.get("Incidents", js.ref("Incidents")),
        "/api/v1/incidents/timeline": js.get(
            "Incidents of the last 24 h", js.ref("IncidentTimeline")
        ),
    }
