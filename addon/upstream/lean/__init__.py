"""The proxy's own upstream HTTP client (``proxy.upstream_client: lean``, the
default): ``LeanTransport``'s pool (``client.py``) over keep-alive
connections and the places that bound them (``conn.py``)."""
