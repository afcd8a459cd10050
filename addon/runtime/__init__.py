"""Everything the request path needs, split by lifetime: what outlives a
config (``lasting.py``), what a config decides (``policy.py``), and the pair
the addons share (``runtime.py``: ``Runtime``, ``RuntimeHolder``)."""

from addon.runtime.runtime import Runtime as Runtime
from addon.runtime.runtime import RuntimeHolder as RuntimeHolder
