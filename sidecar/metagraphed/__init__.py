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
* ``rows``, ``pools``, ``health``, ``usage``: the documents, pure;
* ``api``: the aiohttp handlers and the error middleware.

This ``__init__`` imports nothing: import the submodules.
"""
