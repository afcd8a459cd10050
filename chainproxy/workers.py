"""``--workers N``: N proxy processes behind one address, on one machine.

mitmproxy cannot share a listening socket (``SO_REUSEPORT``) without another
patch of its internals, so a well-known balancer listens instead: HAProxy
(Debian package ``haproxy``) in HTTP mode, least-connections over the workers
on loopback ports, WebSocket upgrades passed through, the client's address
appended to ``X-Forwarded-For`` (each worker is told to believe its balancer,
``chainproxy_trusted_proxies=127.0.0.1``, so the quota stays per client).

N quotas would break the rate-limit contract, so with N > 1 the quota is
shared in Redis: the config's ``redis:`` if it has one, else a local
``redis-server`` (Debian package) the launcher starts on a free loopback port
with no persistence; without either the launcher refuses with one line.
"""

from __future__ import annotations

import shutil
from pathlib import Path

BALANCER_SOURCE = "127.0.0.1"  # where the balancer's connections to the workers come from


def find_tool(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for d in ("/usr/sbin", "/usr/bin") if (p := Path(d) / name).exists()), None
    )


def haproxy_config(
    host: str, port: int, workers: list[int], *, server_timeout_s: float, max_fds: int
) -> str:
    """HAProxy in HTTP mode on ``host:port`` over the workers' loopback ports."""
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    servers = "\n".join(
        f"    server w{i} 127.0.0.1:{p} check inter 2s fall 2 rise 1"
        for i, p in enumerate(workers, 1)
    )
    timeout = max(30, round(server_timeout_s) + 15)  # beyond the proxy's failover deadline
    # each client connection costs two descriptors (client and worker side)
    maxconn = max(256, min(20_000, (max_fds - 64) // 2))
    return f"""# written by chainproxy --workers {len(workers)}; regenerated on every start
global
    maxconn {maxconn}
    log stderr format short local0 warning

defaults
    mode http
    log global
    option forwardfor
    timeout connect 2s
    timeout client 60s
    timeout server {timeout}s
    timeout http-request 10s
    timeout http-keep-alive 60s
    timeout tunnel 1h

frontend chainproxy
    bind {bind}
    default_backend workers

backend workers
    balance leastconn
    retry-on conn-failure empty-response
    retries 2
    option redispatch
{servers}
"""


def haproxy_argv(tool: str, config: Path) -> list[str]:
    return [tool, "-db", "-f", str(config)]  # -db: foreground, no daemon


def redis_argv(tool: str, port: int, directory: Path) -> list[str]:
    """A throw-away redis-server for the quota: loopback, no persistence."""
    return [
        tool,
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--save", "",
        "--appendonly", "no",
        "--dir", str(directory),
        "--maxmemory", "256mb",
        "--maxmemory-policy", "allkeys-lru",
        "--protected-mode", "yes",
    ]  # fmt: skip
