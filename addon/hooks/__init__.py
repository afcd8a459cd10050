"""The top floor: every class mitmproxy calls (settings, session,
passthrough, drain, shipping, idle connections, the pipeline, pre-warm, the
WebSocket handler, the snapshot refresher, the read limits), and the only
modules that touch the ``RuntimeHolder``."""
