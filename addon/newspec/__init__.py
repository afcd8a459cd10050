"""Substrate's new JSON-RPC interface as chainproxy serves it from legacy
calls (pure translation, the shared storage reads, and which methods are
served where). Imports only downward: ``addon.rpc``, ``addon.chain`` and
``addon.quota``; the steps and the follows import it."""
