"""Prometheus metrics at ``/metrics`` (prometheus-client), and the proxies'
live metrics they expose:

* ``batch_section``: a usage batch's ``metrics`` section (``common.metrics_wire``),
  validated (pure);
* ``proxy_counters``: the proxies' live metrics since the sidecar started,
  accumulated from those sections (no I/O);
* ``collector``: the collector and the scrape body, from the families it
  gathers: the registry and prober's (``registry_families``), the proxies'
  (``proxy_families``), the nodes' budgets and capacity (``upstream_families``)
  and the networks' chain runtimes (``chain_runtime_families``).

Every name is listed in ``deploy/README.md``. This ``__init__`` imports
nothing: import the submodules.
"""
