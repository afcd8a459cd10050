"""Usage statistics: the addon's usage batches in, the 7-day summary out (the
batches' live-metrics sections go on to ``sidecar.metrics.proxy_counters``).

* ``stats``: the pure part (batch validation, the window, the summary);
* ``rows``, ``sql``, ``store``: the SQLite rollup tables (``usage.sqlite3``);
* ``service``: ``UsageService``, what the rest of the sidecar calls (its
  handlers: ``sidecar.server.handlers.usage``).

This ``__init__`` imports nothing: import the submodules.
"""
