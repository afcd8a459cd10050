"""The sidecar's aiohttp request handlers, one module per part of the URL
table (``sidecar.server.routes``): ``ops`` (liveness, metrics, the OpenAPI
document), ``registry`` (the registry's paths and the addon's routing
snapshot), ``networks``, ``usage``, ``dashboard`` and ``metagraphed`` (its
paths and its error middleware). Each parses its input, calls the domain
packages (which know nothing of aiohttp's web side) and answers.

This ``__init__`` imports nothing: import the submodules.
"""
