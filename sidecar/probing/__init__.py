"""Probing: what the sidecar learns about each endpoint by calling it.

* ``results``: the probe result record and its classifications (``live``,
  ``dead``, ``timeout``, …), shared by every part of the sidecar;
* ``probes``: one probe per endpoint kind (node-rpc, node-wss, data-artifact, sse);
* ``health``: per-endpoint health from probe results, with flap damping (pure);
* ``prober``: the scheduler that runs the probes and keeps the health map;
* ``store``: SQLite persistence of probe history and health.

This ``__init__`` imports nothing: import the submodules.
"""
