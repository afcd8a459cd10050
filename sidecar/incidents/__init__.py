"""Incidents: when an endpoint was failing.

* ``tracker``: incidents from the Prober's health transitions (pure);
* ``store``: their SQLite persistence (table ``incidents``).

This ``__init__`` imports nothing: import the submodules.
"""
