"""The dashboard at ``/``: server-rendered HTML, no JavaScript needed.

* ``page``: the handler and its Jinja2 environment (``templates/``);
* ``view``: what the page adds to the API's documents (pure);
* ``chart``: the requests-over-time chart as numbers for inline SVG (pure).

This ``__init__`` imports nothing: import the submodules.
"""
