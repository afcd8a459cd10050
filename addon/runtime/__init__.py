"""Everything the request path needs, split by lifetime: what outlives a
config (``lasting.py``), what a config decides (``policy.py``), and the pair
the steps are handed (``runtime.py``: ``Runtime``)."""

from addon.runtime.runtime import Runtime as Runtime
