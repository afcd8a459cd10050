"""The sidecar's aiohttp server: the application and its wiring (``app``), the
URL table (``routes``), the typed state keys (``app_keys``), the error body
(``json_errors``), the operational handlers (``ops_api``: liveness, metrics,
the OpenAPI document) and the OpenAPI document itself (``openapi``).

This ``__init__`` imports nothing: import the submodules.
"""
