"""Fixtures every test directory may use."""

from tests.redis_server import redis_server  # noqa: F401  (a real redis-server, per test)
