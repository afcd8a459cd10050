"""The document's incidents part: the list and the 24 h timeline
(``sidecar.incidents``, ``sidecar.views``). ``Incident`` is also used by the
endpoint part."""

from __future__ import annotations

from sidecar.openapi.schema import (
    ENDPOINT_ID,
    ISO,
    Schema,
    arr,
    enum,
    get,
    integer,
    nullable,
    obj,
    ref,
    string,
)


def schemas() -> dict[str, Schema]:
    return {
        "Incident": obj(
            {
                "severity": enum("Degraded", "Down"),
                "endpoint": ENDPOINT_ID,
                "state": enum("ongoing", "resolved"),
                "started": ISO,
                "ended": nullable(ISO, "string"),
                "duration": string("e.g. 2h 05m", pattern=r"^[0-9]+h [0-5][0-9]m$"),
                "message": string("the failure classification, e.g. dead, timeout, http-503"),
            }
        ),
        "Incidents": obj(
            {
                "hosts": integer(desc="distinct hosts among the incidents listed"),
                "incidents": arr(ref("Incident")),
            },
            "Ongoing incidents and those resolved in the last 7 days, newest first (<= 200).",
        ),
        "IncidentTimeline": obj(
            {
                "endpoints": arr(
                    obj({"endpoint": ENDPOINT_ID, "ongoing": integer(), "total": integer()})
                ),
                "hosts": arr(
                    obj(
                        {
                            "host": string(),
                            "ongoing": integer(),
                            "total": integer(),
                            "links": arr(ENDPOINT_ID),
                        }
                    )
                ),
            },
            "Incidents of the last 24 h per endpoint and per host.",
        ),
    }


def paths() -> dict[str, Schema]:
    return {
        "/api/v1/incidents": get("Incidents", ref("Incidents")),
        "/api/v1/incidents/timeline": get("Incidents of the last 24 h", ref("IncidentTimeline")),
    }
