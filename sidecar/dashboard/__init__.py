"""The dashboard at ``/``: server-rendered HTML, no JavaScript needed.

* ``page``: the page from the registry, usage and history, and its Jinja2
  environment (``templates/``); its handler is ``sidecar.server.handlers.dashboard``;
* ``scope``: the one-network scope of ``/?network=…`` and the links keeping it (pure);
* ``wording``: times, back-offs, budgets and learned rates in words (pure);
* ``chart``: the requests-over-time chart as numbers for inline SVG (pure);
* ``pictures``: the sparklines, incident strips and lag charts (pure).

This ``__init__`` imports nothing: import the submodules.
"""
