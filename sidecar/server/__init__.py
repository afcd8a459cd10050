"""The sidecar's aiohttp server: the application and its wiring (``app``), the
URL table (``routes``), the typed state keys (``app_keys``), the error body
(``json_errors``), the request handlers (``handlers``: one module per part of
the URL table), the SIGHUP reload (``reload``) and the OpenAPI document
(``openapi``). The only package of the sidecar that imports ``aiohttp.web``;
the domain packages below it never import it back.

This ``__init__`` imports nothing: import the submodules.
"""
