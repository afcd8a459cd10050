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
the sidecar (``sidecar.server.routes``), add it to its part too: a test compares the
app's routes with this document.

The document itself is assembled in ``document`` (``openapi_document()``).
This ``__init__`` imports nothing, so the parts and the assembly never import
the package back.
"""
