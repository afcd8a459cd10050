"""``--workers N`` (``chainproxy/workers.py``, ``chainproxy/worker_stack.py``):
the HAProxy configuration the launcher writes (checked by the real ``haproxy -c``
when it is installed), the throw-away redis-server's command line, and the one
line the launcher prints when a program it needs is missing."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from chainproxy import worker_stack
from chainproxy.workers import BALANCER_SOURCE, find_tool, haproxy_argv, haproxy_config, redis_argv
from common.config import parse_config

HAPROXY = find_tool("haproxy")
needs_haproxy = pytest.mark.skipif(
    HAPROXY is None, reason="haproxy is not installed (make test installs it: make scale-deps)"
)
PORTS = [41001, 41002, 41003]


def _config(host: str = "127.0.0.1", port: int = 8080, **kw: Any) -> str:
    kw.setdefault("server_timeout_s", 15)
    kw.setdefault("max_fds", 1024)
    return haproxy_config(host, port, PORTS, **kw)


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()]


def _value(text: str, directive: str) -> str:
    found = [
        line[len(directive) :].strip() for line in _lines(text) if line.startswith(f"{directive} ")
    ]
    assert len(found) == 1, (directive, found)
    return found[0]


# --- the generated haproxy.cfg -------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "bind"),
    [
        ("127.0.0.1", "bind 127.0.0.1:8080"),
        ("0.0.0.0", "bind 0.0.0.0:8080"),
        ("::", "bind [::]:8080"),
        ("::1", "bind [::1]:8080"),
        ("2001:db8::7", "bind [2001:db8::7]:8080"),
        ("localhost", "bind localhost:8080"),
    ],
)
def test_bind_line(host: str, bind: str) -> None:
    lines = _lines(_config(host))
    assert [line for line in lines if line.startswith("bind ")] == [bind]


def test_one_server_line_per_worker_port() -> None:
    servers = [line for line in _lines(_config()) if line.startswith("server ")]
    assert len(servers) == len(PORTS)
    for line, port in zip(servers, PORTS, strict=True):
        assert f" 127.0.0.1:{port} " in f"{line} "
        assert " check" in line  # a dead worker is taken out of the rotation
    names = [line.split()[1] for line in servers]
    assert len(set(names)) == len(names)


def test_single_worker() -> None:
    text = haproxy_config("127.0.0.1", 8080, [45000], server_timeout_s=15, max_fds=1024)
    assert [line for line in _lines(text) if line.startswith("server ")] == [
        "server w1 127.0.0.1:45000 check inter 2s fall 2 rise 1"
    ]


def test_http_mode_forwardfor_and_websocket_tunnel() -> None:
    lines = _lines(_config())
    assert "mode http" in lines
    assert "option forwardfor" in lines  # each worker sees its client (trusted balancer)
    tunnel = _value(_config(), "timeout tunnel")  # an upgraded WebSocket lives this long
    assert tunnel.endswith("h") and int(tunnel[:-1]) >= 1
    assert "balance leastconn" in lines


@pytest.mark.parametrize("deadline_s", [1, 6, 15, 15.4, 15.6, 60, 300])
def test_server_timeout_beyond_the_failover_deadline(deadline_s: float) -> None:
    value = _value(_config(server_timeout_s=deadline_s), "timeout server")
    assert value.endswith("s")
    assert int(value[:-1]) > deadline_s
    assert int(value[:-1]) >= 30  # the floor for short deadlines


@pytest.mark.parametrize("max_fds", [1024, 4096, 65_536, 1_048_576])
def test_maxconn_bounded_by_the_descriptor_limit(max_fds: int) -> None:
    maxconn = int(_value(_config(max_fds=max_fds), "maxconn"))
    assert 2 * maxconn <= max_fds  # two descriptors per proxied connection
    assert maxconn <= 20_000
    assert maxconn >= 256


def test_maxconn_grows_with_the_limit() -> None:
    small = int(_value(_config(max_fds=1024), "maxconn"))
    large = int(_value(_config(max_fds=65_536), "maxconn"))
    assert small < large


def test_haproxy_runs_in_the_foreground() -> None:
    argv = haproxy_argv("/usr/sbin/haproxy", Path("/run/x/haproxy.cfg"))
    assert argv[0] == "/usr/sbin/haproxy"
    assert "-db" in argv  # not a daemon: the supervisor owns it
    assert argv[argv.index("-f") + 1] == "/run/x/haproxy.cfg"


@needs_haproxy
@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::", "::1"])
@pytest.mark.parametrize("max_fds", [1024, 1_048_576])
def test_real_haproxy_accepts_the_config(tmp_path: Path, host: str, max_fds: int) -> None:
    assert HAPROXY is not None
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(_config(host, 18080, server_timeout_s=15, max_fds=max_fds))
    done = subprocess.run(
        [HAPROXY, "-c", "-f", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "ALERT" not in output, output


@needs_haproxy
def test_real_haproxy_rejects_a_broken_config(tmp_path: Path) -> None:
    """The check above can fail: haproxy -c does reject a bad file."""
    assert HAPROXY is not None
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(_config().replace("balance leastconn", "balance nosuchalgorithm"))
    done = subprocess.run(
        [HAPROXY, "-c", "-f", str(cfg)], capture_output=True, timeout=60, check=False
    )
    assert done.returncode != 0


# --- the local redis-server ----------------------------------------------------------


def test_redis_argv_is_loopback_without_persistence(tmp_path: Path) -> None:
    argv = redis_argv("/usr/bin/redis-server", 46379, tmp_path)
    assert argv[0] == "/usr/bin/redis-server"
    opts = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert opts["--bind"] == "127.0.0.1"
    assert opts["--port"] == "46379"
    assert opts["--save"] == ""  # no RDB snapshots
    assert opts["--appendonly"] == "no"
    assert opts["--dir"] == str(tmp_path)
    assert opts["--maxmemory"] and opts["--maxmemory-policy"].endswith("lru")


def test_balancer_source_is_loopback() -> None:
    assert BALANCER_SOURCE == "127.0.0.1"
    assert re.search(r"server \S+ 127\.0\.0\.1:", _config())  # workers listen where it says


# --- worker_tools: what is missing, in one line --------------------------------------


def _tools(monkeypatch: pytest.MonkeyPatch, present: set[str]) -> None:
    monkeypatch.setattr(
        worker_stack, "find_tool", lambda name: f"/usr/sbin/{name}" if name in present else None
    )


def test_all_tools_present(monkeypatch: pytest.MonkeyPatch) -> None:
    _tools(monkeypatch, {"haproxy", "redis-server"})
    assert worker_stack.worker_tools(parse_config({}, {})) == {
        "haproxy": "/usr/sbin/haproxy",
        "redis-server": "/usr/sbin/redis-server",
    }


@pytest.mark.parametrize("redis_present", [True, False])
def test_missing_haproxy_is_one_line(monkeypatch: pytest.MonkeyPatch, redis_present: bool) -> None:
    _tools(monkeypatch, {"redis-server"} if redis_present else set())
    reason = worker_stack.worker_tools(parse_config({}, {}))
    assert isinstance(reason, str)
    assert "\n" not in reason
    assert "HAProxy" in reason and "apt-get install haproxy" in reason


def test_missing_redis_server_without_a_redis_section(monkeypatch: pytest.MonkeyPatch) -> None:
    _tools(monkeypatch, {"haproxy"})
    reason = worker_stack.worker_tools(parse_config({}, {}))
    assert isinstance(reason, str)
    assert "\n" not in reason
    assert "redis: section" in reason and "redis-server" in reason


def test_a_redis_section_needs_no_local_redis_server(monkeypatch: pytest.MonkeyPatch) -> None:
    _tools(monkeypatch, {"haproxy"})
    config = parse_config({"redis": {"url": "redis://10.0.0.5:6379/0"}}, {})
    assert worker_stack.worker_tools(config) == {"haproxy": "/usr/sbin/haproxy"}


def test_find_tool_looks_in_sbin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """haproxy lives in /usr/sbin, which is not on every PATH."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_tool("surely-not-a-real-tool-name") is None
    # a program of /usr/sbin (haproxy where installed; any of them otherwise), found
    # there with PATH not naming it: the check runs on every machine
    sbin = Path("/usr/sbin")
    found = [p for p in sorted(sbin.iterdir()) if p.is_file() and os.access(p, os.X_OK)]
    assert found, "/usr/sbin holds no program here"
    in_sbin = sbin / "haproxy" if (sbin / "haproxy").exists() else found[0]
    assert find_tool(in_sbin.name) == str(in_sbin)
    tool = tmp_path / "mytool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert find_tool("mytool") == str(tool)


# --- the rolling restart's parts of the config ---------------------------------------


def test_spare_slots_wait_in_maintenance() -> None:
    servers = [line for line in _lines(_config(spares=1)) if line.startswith("server ")]
    assert len(servers) == len(PORTS) + 1
    assert [line.split()[1] for line in servers] == ["w1", "w2", "w3", "w4"]
    assert servers[-1].endswith(" disabled") and not any(
        s.endswith(" disabled") for s in servers[:-1]
    )


def test_the_runtime_api_socket_is_the_launchers_alone(tmp_path: Path) -> None:
    assert "stats socket" not in _config()
    sock = tmp_path / "haproxy.sock"
    line = _value(_config(admin_socket=sock), "stats socket")
    assert line == f"{sock} mode 600 level admin"


def test_a_refused_call_is_sent_to_another_worker_at_once() -> None:
    lines = _lines(_config())
    assert "retry-on conn-failure empty-response" in lines
    assert "option redispatch 1" in lines  # on every retry, not only the last
    assert int(_value(_config(), "retries")) >= 1


@needs_haproxy
def test_real_haproxy_accepts_spares_and_the_socket(tmp_path: Path) -> None:
    assert HAPROXY is not None
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(_config(spares=1, admin_socket=tmp_path / "h.sock"))
    done = subprocess.run(
        [HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and "ALERT" not in done.stdout + done.stderr, done.stderr
