"""Usage statistics: the addon's usage batches in, the 7-day summary and the
proxies' live metrics out.

* ``stats``: the pure part (batch validation, the window, the summary);
* ``rows``, ``sql``, ``store``: the SQLite rollup tables (``usage.sqlite3``);
* ``proxy_counters``: the proxies' live metrics since start (no I/O);
* ``service``: ``UsageService``, what the rest of the sidecar calls (its
  handlers: ``sidecar.server.handlers.usage``).

This ``__init__`` imports nothing: import the submodules.
"""
