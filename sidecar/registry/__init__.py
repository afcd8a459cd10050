"""The endpoint registry as the API, the dashboard and the addon see it.

* ``service``: ``RegistryService``, the Prober's health, the incidents and the
  clock behind one object;
* ``pools``: pools and registry totals (pure);
* ``documents``: the registry's public JSON documents (pure);
* ``endpoint_detail``: the document of one endpoint, ``/api/v1/endpoints/{id}`` (pure);
* ``routing_snapshot``: chain tip, lag and the ranked routing snapshot the
  addon reads from ``/api/v1/internal/routes/<network>`` (pure).

The handlers of the registry's paths are in ``sidecar.server.handlers``.

This ``__init__`` imports nothing: import the submodules.
"""
