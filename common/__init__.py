"""What both processes share: the config, endpoint ids, the latency histogram,
the default allowlist. Imports nothing of addon/, sidecar/ or chainproxy/."""
