"""The document's Metagraphed part, continued: the schemas of the health,
usage and downtime documents (``sidecar.metagraphed.documents``, ``.usage``);
their paths are in ``sidecar.server.openapi.metagraphed``."""

from __future__ import annotations

from sidecar.metagraphed import vocab
from sidecar.server.openapi import schema as js
from sidecar.server.openapi.schema import Schema

_STR_N = js.string(null=True)
_INT_N = js.integer(null=True)
_ISO_N: Schema = {**js.nullable(js.ISO, "string")}
_COUNTS: Schema = {"type": "object", "additionalProperties": js.integer()}
_STATUS = js.enum(*vocab.STATUSES)


def schemas() -> dict[str, Schema]:
    base = {"schema_version": {"const": 1}, "contract_version": js.string(), "generated_at": js.ISO}
    span = {"start": _INT_N, "end": _INT_N}
    ratio: Schema = {"type": ["number", "null"], "minimum": 0, "maximum": 1}
    return {
        "MgHealth": js.obj(
            {
                **base,
                "source": js.string(),
                "health_source": js.string(),
                "scope": js.string(),
                "operational_observed_at": _ISO_N,
                "global": js.obj({"surface_count": js.integer(), "status_counts": _COUNTS}),
                "subnets": js.arr(
                    js.obj(
                        {
                            "netuid": js.integer(),
                            "status": _STATUS,
                            "surface_count": js.integer(),
                            **{f"{s}_count": js.integer() for s in vocab.STATUSES},
                            "avg_latency_ms": _INT_N,
                            "latency_sample_count": js.integer(),
                            "last_checked": _ISO_N,
                            "last_ok": _ISO_N,
                        }
                    )
                ),
            }
        ),
        "MgRpcUsage": js.obj(
            {
                "schema_version": {"const": 1},
                "window": js.enum("7d"),
                "bucket_granularity": js.enum("1h"),
                "observed_at": js.integer(null=True, desc="epoch ms of the last usage report"),
                "source": js.enum("rpc-proxy"),
                "coverage": js.obj(
                    {
                        **span,
                        "segments": js.arr(js.obj({"source": js.string(), **span})),
                        "latency_percentiles": {**js.obj(span), "type": ["object", "null"]},
                    }
                ),
                "summary": js.obj(
                    {
                        "total_requests": js.integer(),
                        "ok_requests": js.integer(),
                        "error_requests": js.integer(),
                        "error_rate": ratio,
                        "failover_requests": js.integer(),
                        "failover_rate": ratio,
                        "cache_hits": js.integer(),
                        "cache_hit_rate": ratio,
                        "latency_ms": js.obj({"p50": _INT_N, "p95": _INT_N, "avg": _INT_N}),
                    }
                ),
                "endpoints": js.arr(
                    js.obj(
                        {
                            "rank": js.integer(1),
                            "endpoint_id": js.string(),
                            "provider": _STR_N,
                            "requests": js.integer(),
                            "ok_requests": js.integer(),
                            "error_rate": ratio,
                            "avg_latency_ms": _INT_N,
                        }
                    )
                ),
                "networks": js.arr(
                    js.obj(
                        {
                            "network": js.string(),
                            "requests": js.integer(),
                            "ok_requests": js.integer(),
                            "error_rate": ratio,
                        }
                    )
                ),
                "buckets": js.arr(
                    js.obj(
                        {
                            "ts": js.integer(desc="hour start, epoch ms"),
                            "requests": js.integer(),
                            "errors": js.integer(),
                            "avg_latency_ms": _INT_N,
                        }
                    )
                ),
            }
        ),
        "MgDowntime": js.obj(
            {
                "schema_version": {"const": 1},
                "window": js.enum("7d", "30d"),
                "observed_at": js.ISO,
                "source": js.string(),
                "min_incident_samples": js.integer(),
                "summary": js.obj(
                    {"affected_surface_count": js.integer(), "incident_count": js.integer()}
                ),
                "surfaces": js.arr(
                    js.obj(
                        {
                            "surface_id": js.ENDPOINT_ID,
                            "netuid": js.integer(),
                            "incident_count": js.integer(),
                            "downtime_ms": js.integer(),
                            "incidents": js.arr(
                                js.obj(
                                    {
                                        "started_at": js.integer(),
                                        "ended_at": js.integer(),
                                        "duration_ms": js.integer(),
                                        "failed_samples": {"type": "null"},
                                    }
                                )
                            ),
                            "transient_failed_samples": {"type": "null"},
                            "transient_failure_count": {"type": "null"},
                        }
                    )
                ),
            }
        ),
    }


def paths() -> dict[str, Schema]:
    return {}
