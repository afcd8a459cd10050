"""Small builders of JSON Schema 2020-12 (OpenAPI 3.1) used by every part of
the document, and the pieces several parts share.

Objects list every field they have as ``required``: an answer without one is
a broken contract, and a test validates real answers against the document.
"""

from __future__ import annotations

from typing import Any

from common.config import KINDS

Schema = dict[str, Any]

STATUS = ("OK", "Degraded", "Unknown")
ENDPOINT_ID_PATTERN = r"^endpoint-srf-[0-9a-f]{16}$"


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(props: dict[str, Schema], description: str | None = None) -> Schema:
    out: Schema = {"type": "object", "required": list(props), "properties": props}
    if description:
        out["description"] = description
    return out


def arr(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def integer(minimum: int | None = 0, *, null: bool = False, desc: str | None = None) -> Schema:
    out: Schema = {"type": ["integer", "null"] if null else "integer"}
    if minimum is not None:
        out["minimum"] = minimum
    if desc:
        out["description"] = desc
    return out


def string(desc: str | None = None, *, null: bool = False, **kw: Any) -> Schema:
    out: Schema = {"type": ["string", "null"] if null else "string", **kw}
    if desc:
        out["description"] = desc
    return out


def enum(*values: str) -> Schema:
    return {"type": "string", "enum": list(values)}


def nullable(schema: Schema, type_: str) -> Schema:
    """``schema`` that may also be null (``type_`` is its JSON type)."""
    return {**schema, "type": [type_, "null"]}


BOOL: Schema = {"type": "boolean"}
PCT: Schema = {"type": "number", "minimum": 0, "maximum": 100}
COUNT_PCT = obj({"count": integer(), "pct": PCT})
ISO: Schema = {
    "type": "string",
    "format": "date-time",
    "description": "UTC, e.g. 2026-11-22T00:50:00Z",
}
ENDPOINT_ID = string("endpoint identifier", pattern=ENDPOINT_ID_PATTERN)
STATUS_ENUM = enum(*STATUS)
KIND_ENUM = enum(*KINDS)
ERROR = ref("Error")
# The node's capacity in every endpoint object (``sidecar.registry.upstream.capacity``).
CAPACITY: dict[str, Schema] = {
    "backoff_until": {
        **nullable(ISO, "string"),
        "description": "while the node backs off (it answered 429, or 503 with Retry-After):"
        " when it gets calls again; else null",
    },
    "budget": obj(
        {
            "max_rps": integer(1, null=True, desc="registry.endpoints[].max_rps; null: none"),
            "max_concurrency": integer(
                1, null=True, desc="registry.endpoints[].max_concurrency; null: none"
            ),
        },
        "the budget the config gives the node",
    ),
    "learned_rps": integer(
        null=True, desc="calls per second the proxies learned from the node's 429s; null: none"
    ),
}


# --- operations ------------------------------------------------------------------------------


def content(schema: Schema, description: str, media_type: str = "application/json") -> Schema:
    return {"description": description, "content": {media_type: {"schema": schema}}}


def param(where: str, name: str, schema: Schema, description: str | None = None) -> Schema:
    """A parameter ``in: where``; path parameters are required, query ones not."""
    out: Schema = {"name": name, "in": where, "required": where == "path", "schema": schema}
    if description:
        out["description"] = description
    return out


def get(
    summary: str,
    schema: Schema,
    *,
    errors: dict[str, str] | None = None,
    parameters: list[Schema] | None = None,
) -> Schema:
    """A JSON ``GET``: 200 with ``schema``, each of ``errors`` (status → why) the Error body."""
    responses = {"200": content(schema, "OK")}
    for code, why in (errors or {}).items():
        responses[code] = content(ERROR, why)
    op: Schema = {"summary": summary, "responses": responses}
    if parameters:
        op["parameters"] = parameters
    return {"get": op}
