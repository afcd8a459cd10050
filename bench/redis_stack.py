"""Processes and load for scenario 10 (Redis scale-out, ``bench/redis_scale.py``):
a redis-server and HAProxy started exactly as ``--workers N`` starts them
(``chainproxy/workers.py``: ``redis_argv``, ``haproxy_config``), but as children
of the benchmark's ``Stack`` so nothing outlives the run; configs derived from
one base config (same sidecar, same data directory, like ``--workers``); and
``wrk`` sending each request with an ``X-Forwarded-For`` from a rotating set of
client identities (the quota stays active and never refuses); the CPU of each
part (proxies, HAProxy, Redis) per request of a load run, sides run alternately."""

from __future__ import annotations

import os
import random
import resource
import statistics
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.load import _LUA, LoadResult, generator, parse_result, run_load
from bench.measure import RPC_PATH
from bench.stack import Stack
from bench.throughput import MISS_BODY
from bench.wsload import KEY_PREFIX
from chainproxy.supervisor import Child, free_port, wait_port
from chainproxy.workers import find_tool, haproxy_argv, haproxy_config, redis_argv

PARTS = ("proxy", "haproxy", "redis")  # whose CPU per request is measured
IDENTITIES = 10_000  # distinct X-Forwarded-For values the throughput runs rotate through

# wrk: one X-Forwarded-For per request, 10.x.y.z over IDENTITIES addresses (LuaJIT: no //)
_XFF_REQUEST = """
local n = 0
request = function()
  n = n + 1
  local id = n % {identities}
  wrk.headers["X-Forwarded-For"] = "10." .. math.floor(id / 65536) .. "." ..
    (math.floor(id / 256) % 256) .. "." .. (id % 256)
  return wrk.format()
end
"""


def missing_tools() -> str | None:
    """Why scenario 10 cannot run here, or None (without wrk, ``bench/pyload.py``
    sends the load)."""
    missing = [t for t in ("redis-server", "haproxy") if find_tool(t) is None]
    if not missing:
        return None
    return f"{', '.join(missing)} not installed (make scale-deps installs them)"


def start_redis(stack: Stack, name: str, cpus: set[int] | None = None) -> tuple[Child, str]:
    """A throw-away redis-server on a free loopback port (no persistence)."""
    tool = find_tool("redis-server")
    assert tool is not None
    port = free_port()
    directory = stack.tmp / name
    directory.mkdir(exist_ok=True)
    child = stack.spawn(name, redis_argv(tool, port, directory), cpus)
    wait_port(port, child)
    return child, f"redis://127.0.0.1:{port}/0"


def start_haproxy(
    stack: Stack, name: str, worker_ports: list[int], cpus: set[int] | None = None
) -> tuple[Child, str]:
    """HAProxy with the configuration ``--workers`` writes, over ``worker_ports``."""
    tool = find_tool("haproxy")
    assert tool is not None
    port = free_port()
    cfg = stack.tmp / f"{name}.cfg"
    cfg.write_text(
        haproxy_config(
            "127.0.0.1",
            port,
            worker_ports,
            server_timeout_s=15,
            max_fds=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        )
    )
    child = stack.spawn(name, haproxy_argv(tool, cfg), cpus)
    wait_port(port, child)
    return child, f"http://127.0.0.1:{port}"


def derive_config(
    base: Path,
    name: str,
    *,
    redis: dict[str, Any] | None = None,
    rate_limit: dict[str, Any] | None = None,
) -> Path:
    """A copy of ``base`` (same sidecar and data directory) with a ``redis:``
    section and/or another ``proxy.rate_limit``."""
    config = yaml.safe_load(base.read_text())
    if redis is not None:
        config["redis"] = redis
    if rate_limit is not None:
        config["proxy"]["rate_limit"] = rate_limit
    path = base.with_name(f"{name}.yaml")
    path.write_text(yaml.safe_dump(config))
    return path


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def cpu_seconds(pid: int) -> float:
    """utime+stime of one process (all its threads)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_DISTINCT_BODY = """
local nonce = string.format("%08x", {nonce})
local base_request = request
request = function()
  wrk.body = string.format(
    '{"jsonrpc":"2.0","id":%d,"method":"state_getStorage","params":["{prefix}%s%016x"]}',
    n, nonce, n)
  return base_request()
end
"""


def xff_load(
    url: str,
    body: bytes,
    *,
    connections: int,
    duration_s: float,
    identities: int = IDENTITIES,
    timeout_s: float = 10.0,
    distinct: bool = False,
) -> LoadResult:
    """Closed-loop wrk load on ``url`` + the RPC path, each request from the next
    of ``identities`` client addresses (``X-Forwarded-For``); ``distinct``: every
    request a ``state_getStorage`` of a key no request asked before, not ``body``.
    Without wrk, ``bench/pyload.py`` sends the same."""
    if generator() != "wrk":
        return run_load(
            url + RPC_PATH,
            body,
            connections=connections,
            duration_s=duration_s,
            timeout_s=timeout_s,
            tool="pyload",
            distinct=distinct,
            xff=identities,
        )
    lua = _LUA.replace("{{", "{").replace("}}", "}").replace("{body}", body.decode())
    lua += _XFF_REQUEST.replace("{identities}", str(identities))
    if distinct:
        lua += _DISTINCT_BODY.replace("{nonce}", str(random.getrandbits(31))).replace(
            "{prefix}", KEY_PREFIX
        )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(lua)
        script = f.name
    argv = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(duration_s))}s",
        f"--timeout={max(1, round(timeout_s))}s",
        "-s",
        script,
        url + RPC_PATH,
    ]
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=duration_s + timeout_s + 30
        )
    finally:
        Path(script).unlink(missing_ok=True)
    return parse_result(out.stdout, f"wrk failed:\n{out.stdout}\n{out.stderr}")


# --- measuring: one load run with the CPU of each part, sides run alternately ----------


@dataclass
class Side:
    name: str
    url: str
    parts: dict[str, list[int]]  # part -> the pids whose CPU counts for it


@dataclass
class XRun:
    load: LoadResult
    cpu_us: dict[str, float] = field(default_factory=dict)  # part -> µs per request


def measure(side: Side, conns: int, seconds: float, distinct: bool = False) -> XRun:
    before = {k: sum(cpu_seconds(p) for p in pids) for k, pids in side.parts.items()}
    load = xff_load(side.url, MISS_BODY, connections=conns, duration_s=seconds, distinct=distinct)
    n = max(1, load.requests)
    cpu = {
        k: (sum(cpu_seconds(p) for p in pids) - before[k]) / n * 1e6
        for k, pids in side.parts.items()
    }
    return XRun(load, cpu)


def alternate(
    sides: list[Side], conns: int, seconds: float, reps: int, warm_s: float, sent: list[int]
) -> dict[str, list[XRun]]:
    """Every side once per repetition, the order rotated; ``sent[0]`` += the
    requests (warm-up included) sent to sides that use Redis."""
    for s in sides if warm_s > 0 else ():
        warm = xff_load(s.url, MISS_BODY, connections=conns, duration_s=warm_s)
        sent[0] += warm.requests if "redis" in s.parts else 0
    out: dict[str, list[XRun]] = {s.name: [] for s in sides}
    for rep in range(reps):
        for s in sides[rep % len(sides) :] + sides[: rep % len(sides)]:
            out[s.name].append(measure(s, conns, seconds))
            sent[0] += out[s.name][-1].load.requests if "redis" in s.parts else 0
    return out


def med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def rps(runs: list[XRun]) -> float | None:
    return med([r.load.rps for r in runs])


def p50_us(runs: list[XRun]) -> float | None:
    m = med([r.load.p50_ms for r in runs])
    return None if m is None else m * 1000


def cpu(runs: list[XRun], part: str = "proxy") -> float | None:
    return med([r.cpu_us[part] for r in runs if part in r.cpu_us])


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def errors(runs: list[XRun]) -> int:
    return sum(r.load.errors for r in runs)


def summary(runs: dict[str, list[XRun]]) -> dict[str, Any]:
    return {
        name: {
            "rps": rps(rr),
            "p50_us": p50_us(rr),
            "cpu_us": {k: cpu(rr, k) for k in PARTS if any(k in r.cpu_us for r in rr)},
            "errors": errors(rr),
            "reps": [
                {"rps": round(r.load.rps, 1), "p50_ms": r.load.p50_ms, "cpu_us": r.cpu_us}
                for r in rr
            ],
        }
        for name, rr in runs.items()
    }
