"""The ground floor: the JSON-RPC vocabulary every other part of the addon
speaks (calls, block facts, subscription method tables, upstream attempts,
``Later``). It imports nothing of the addon."""
