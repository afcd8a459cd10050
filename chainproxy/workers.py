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

A rolling restart (``chainproxy reload``, ``chainproxy/rolling.py``) swaps
workers through HAProxy's runtime API on an admin socket in ``data_dir/run``,
so the balancer needs no reload of its own: the config has one spare server
slot (in maintenance) beside the N live ones, and a replacement takes the
spare while the worker it replaces drains and becomes the next spare.
"""

from __future__ import annotations

import shutil
from pathlib import Path

BALANCER_SOURCE = "127.0.0.1"  # where the balancer's connections to the workers come from
BACKEND = "workers"  # the backend's name, in the config and in runtime API commands
SERVER_OPTIONS = "check inter 2s fall 2 rise 1"
SPARE_PORT = 1  # a spare slot's placeholder address: it is in maintenance until used


def find_tool(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for d in ("/usr/sbin", "/usr/bin") if (p := Path(d) / name).exists()), None
    )


def haproxy_config(
    host: str,
    port: int,
    workers: list[int],
    *,
    server_timeout_s: float,
    max_fds: int,
    spares: int = 0,
    admin_socket: Path | None = None,
) -> str:
    """HAProxy in HTTP mode on ``host:port`` over the workers' loopback ports;
    ``spares``: server slots in maintenance for replacements; ``admin_socket``:
    the runtime API socket that moves workers in and out of the rotation."""
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    servers = [f"    server w{i} 127.0.0.1:{p} {SERVER_OPTIONS}" for i, p in enumerate(workers, 1)]
    servers += [
        f"    server w{i} 127.0.0.1:{SPARE_PORT} {SERVER_OPTIONS} disabled"
        for i in range(len(workers) + 1, len(workers) + spares + 1)
    ]
    timeout = max(30, round(server_timeout_s) + 15)  # beyond the proxy's failover deadline
    # each client connection costs two descriptors (client and worker side)
    maxconn = max(256, min(20_000, (max_fds - 64) // 2))
    # mode 600: only the launcher's user may take workers out of the rotation
    admin = f"\n    stats socket {admin_socket} mode 600 level admin" if admin_socket else ""
    server_lines = "\n".join(servers)
    return f"""# written by chainproxy --workers {len(workers)}; regenerated on every start
global
    maxconn {maxconn}
    log stderr format short local0 warning{admin}

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
    default_backend {BACKEND}

backend {BACKEND}
    balance leastconn
    # A worker that stopped listening (draining, or gone) refuses the connection,
    # or closes it unanswered: the call is sent again, at once to another worker
    # (redispatch on every retry, not only the last; the calls are read-only).
    retry-on conn-failure empty-response
    retries 2
    option redispatch 1
{server_lines}
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
