"""Probe history kept for the dashboard's pictures: per endpoint and minute,
the probes' latency and failures (24 hours) and each node's lag behind its
network's tip. ``series`` is pure (folding probes into minutes, reading them
back as picture-ready series), ``store`` keeps the minutes in SQLite
(``data_dir/history.sqlite3``), ``recorder`` is the Prober's side of it.

This ``__init__`` imports nothing: import the submodules.
"""
