"""Metagraphed's public API shapes, served from chainproxy's own registry,
probes, incidents and usage statistics, so that Metagraphed's clients (PyPI
``metagraphed``, npm ``@jsonbored/metagraphed``) work against a self-hosted
chainproxy unchanged (docs/METAGRAPHED.md).

* ``vocab``: chainproxy's words in Metagraphed's spelling (kinds, statuses,
  classifications, severities, provider slugs);
* ``listing``: the list engine (query validation, filters, sort, cursor
  pagination, ``fields`` projection);
* ``envelope``: the ``{ok, schema_version, data, meta}`` envelope, the error
  envelope and the headers (ETag, CORS, ``x-metagraph-*``);
* ``rows``, ``documents``, ``usage``: the documents, pure;
* ``paths``: where the API is served (under ``/metagraphed``, and at the root
  where chainproxy's own API leaves the path free).

The aiohttp handlers and the error middleware are in
``sidecar.server.handlers.metagraphed``.

This ``__init__`` imports nothing: import the submodules.
"""
