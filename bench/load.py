"""Load generation for the proxy benchmarks: ``wrk`` with a Lua script (POST
body, JSON summary), or, where wrk is not installed, ``bench/pyload.py`` (an
async Python client in a process of its own). Both run closed-loop: N
connections, each sending its next request when the previous answer arrived."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [==[{body}]==]
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {{"requests":%d,"duration_s":%.6f,"p50_ms":%.3f,"p90_ms":%.3f,' ..
    '"p99_ms":%.3f,"max_ms":%.3f,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\\n',
    summary.requests, summary.duration / 1e6,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000,
    e.connect, e.read, e.write, e.status, e.timeout))
end
"""


@dataclass(frozen=True, slots=True)
class LoadResult:
    requests: int
    duration_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    errors: int  # socket errors + timeouts + non-2xx/3xx answers
    detail: dict[str, int]
    samples: tuple[float, ...] = ()  # every latency in ms, sorted (pyload only)

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s else 0.0


def generator() -> str:
    return "wrk" if shutil.which("wrk") else "pyload"


def run_load(
    url: str,
    body: bytes,
    *,
    connections: int,
    duration_s: float,
    timeout_s: float = 10.0,
    tool: str | None = None,
    rate: float = 0.0,
    distinct: bool = False,
    xff: int = 0,
) -> LoadResult:
    """Closed-loop load against ``url`` for ``duration_s``; returns the summary.

    ``tool="pyload"`` forces the Python client: its percentiles are those of the
    requests sent. wrk's are corrected for coordinated omission: a request that
    took L on a connection whose usual pace is I adds samples L-I, L-2I, … (the
    requests that connection did not send meanwhile), so one 300 ms call on one
    connection becomes ~L/I slow samples. ``rate`` (requests/s, pyload only):
    paced instead of closed-loop. ``distinct`` (pyload only): every call a
    ``state_getStorage`` of a new key instead of ``body``. ``xff`` (pyload only):
    an ``X-Forwarded-For`` on every call, rotating over that many addresses."""
    samples: tuple[float, ...] = ()
    if (tool or generator()) == "wrk" and not rate and not distinct and not xff:
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
            lua = _LUA.replace("{{", "{").replace("}}", "}")
            f.write(lua.replace("{body}", body.decode()))
            script = f.name
        argv = [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{max(1, round(duration_s))}s",
            f"--timeout={max(1, round(timeout_s))}s",
            "-s",
            script,
            url,
        ]
        try:
            out = subprocess.run(
                argv, capture_output=True, text=True, timeout=duration_s + timeout_s + 30
            )
        finally:
            Path(script).unlink(missing_ok=True)
        text = out.stdout
    else:
        with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
            f.write(body)
            body_file = f.name
        samples_file = body_file + ".samples"
        argv = [
            sys.executable,
            str(HERE / "pyload.py"),
            "--url",
            url,
            "--body-file",
            body_file,
            "--connections",
            str(connections),
            "--duration",
            str(duration_s),
            "--timeout",
            str(timeout_s),
            "--rate",
            str(rate),
            "--samples",
            samples_file,
            *(["--distinct"] if distinct else []),
            *(["--xff", str(xff)] if xff else []),
        ]
        try:
            out = subprocess.run(
                argv, capture_output=True, text=True, timeout=duration_s + timeout_s + 30
            )
            samples = tuple(json.loads(Path(samples_file).read_text()))
        except (OSError, ValueError):
            samples = ()
        finally:
            Path(body_file).unlink(missing_ok=True)
            Path(samples_file).unlink(missing_ok=True)
        text = out.stdout
    return parse_result(text, f"load generator failed ({argv[0]}):\n{text}\n{out.stderr}", samples)


def parse_result(text: str, failure: str, samples: tuple[float, ...] = ()) -> LoadResult:
    """The ``BENCHJSON {…}`` line a load generator (wrk script, pyload) prints."""
    line = next((ln for ln in text.splitlines() if ln.startswith("BENCHJSON ")), None)
    if line is None:
        raise RuntimeError(failure)
    d = json.loads(line[len("BENCHJSON ") :])
    detail = {k: int(d[k]) for k in ("connect", "read", "write", "status", "timeout")}
    return LoadResult(
        requests=int(d["requests"]),
        duration_s=float(d["duration_s"]),
        p50_ms=float(d["p50_ms"]),
        p90_ms=float(d["p90_ms"]),
        p99_ms=float(d["p99_ms"]),
        max_ms=float(d["max_ms"]),
        errors=sum(detail.values()),
        detail=detail,
        samples=samples,
    )
