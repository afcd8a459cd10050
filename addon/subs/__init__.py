"""WebSocket read subscriptions: one upstream subscription per distinct
(network, method, params), shared by every client that asks for it, moved to
another node when its node fails, with no gap and no duplicate for clients."""
