"""An untested mitmproxy or wsproto, faked on a real mitmdump (a wrapper sets
the version before mitmdump's own ``main``; the product reads no test switch):
chainproxy refuses to start with one line naming the version and every
mechanism that would be off, the security bounds first; accepted with
``chainproxy_allow_untested=true`` it serves, and the sidecar's ``/metrics``
shows each mechanism off (addon/mitm/versions.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from addon.mitm import versions
from chainproxy.commands import proxy_argv
from tests.e2e.harness import BIN, REPO, Stack, base_config, free_port, wait_http
from tests.e2e.helpers import call, post

pytestmark = pytest.mark.e2e

SECURITY = [m.name for m in versions.MECHANISMS if m.security]
FAST = [m.name for m in versions.MECHANISMS if not m.security]


def _faked(mitmproxy: str | None = None, wsproto: str | None = None) -> str:
    """``python -c`` code: mitmdump's own entry point, the versions faked first."""
    fake = ""
    if mitmproxy:
        fake += f"import mitmproxy.version as v; v.VERSION = {mitmproxy!r}; "
    if wsproto:
        fake += f"import wsproto; wsproto.__version__ = {wsproto!r}; "
    return (
        f"import sys; {fake}from mitmproxy.tools.main import mitmdump; "
        "sys.argv[0] = 'mitmdump'; sys.exit(mitmdump())"
    )


def _argv(code: str, config: Path, sidecar_url: str, port: int, *sets: str) -> list[str]:
    argv = proxy_argv(BIN / "mitmdump", config, sidecar_url, port=port, sets=sets)
    return [sys.executable, "-c", code, *argv[1:]]


@pytest.mark.parametrize(
    ("fake", "named"),
    [
        ({"mitmproxy": "12.9.1"}, "mitmproxy 12.9.1 (tested: 12.2.3)"),
        ({"wsproto": "1.4.0"}, "wsproto 1.4.0 (tested: 1.3.2)"),
    ],
    ids=["mitmproxy", "wsproto"],
)
def test_an_untested_version_stops_the_start_with_one_line(
    tmp_path: Path, fake: dict[str, str], named: str
) -> None:
    config = tmp_path / "c.yaml"
    doc = base_config(tmp_path, [])
    doc["registry"]["endpoints"] = [
        {"url": "http://127.0.0.1:9", "provider": "p", "kind": "node-rpc", "network": "finney"}
    ]
    config.write_text(yaml.safe_dump(doc))
    port = free_port()
    r = subprocess.run(
        _argv(_faked(**fake), config, doc["sidecar"]["url"], port),
        capture_output=True,
        text=True,
        timeout=90,  # a hang guard: two suites side by side once took over 60 s to start it
        cwd=REPO,
    )
    out = r.stdout + r.stderr
    assert r.returncode == versions.REFUSED_EXIT != 0, out
    assert "Traceback" not in out
    lines = [ln for ln in out.splitlines() if "chainproxy refuses to start" in ln]
    assert len(lines) == 1, out
    line = lines[0]
    assert named in line and "chainproxy_allow_untested=true" in line
    where = [line.index(name) for name in (*SECURITY, *FAST)]
    assert where == sorted(where)  # every mechanism named, the security bounds first
    # refused before anything started: no config read, no listener
    assert "listening at" not in out and "chainproxy: networks" not in out
    assert len([ln for ln in out.splitlines() if ln.strip()]) <= 2, out  # and "Loading script"


def _mechanisms_off(sidecar_url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{sidecar_url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        s.labels["mechanism"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "chainproxy_mechanism_off"
        for s in family.samples
    }


async def test_accepted_it_serves_and_metrics_show_every_mechanism_off(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    try:
        stack.start_node("alpha", epoch=time.time() - 600)
        config = stack.write_config(base_config(tmp_path, stack.nodes))
        stack.start_sidecar()
        assert _mechanisms_off(stack.sidecar_url) == {}  # no proxy reported one yet
        port = free_port()
        argv = _argv(
            _faked(mitmproxy="12.9.1"),
            config,
            stack.sidecar_url,
            port,
            "chainproxy_allow_untested=true",
        )
        proxy = stack.spawn("mitmdump-untested", argv)
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/rpc/", proxy)

        reply = await post(f"{url}/rpc/v1/finney", call("chain_getHeader"))
        assert reply.status == 200 and "result" in reply.body, reply.raw

        # the first usage batch (a heartbeat at start) carries the gauge
        for _ in range(150):  # 30 s
            if off := _mechanisms_off(stack.sidecar_url):
                break
            await asyncio.sleep(0.2)
        assert off == {m.key: 1.0 for m in versions.MECHANISMS}

        log = (tmp_path / "mitmdump-untested.log").read_text()
        (line,) = [ln for ln in log.splitlines() if "chainproxy_allow_untested" in ln]
        assert "mitmproxy 12.9.1" in line and all(n in line for n in (*SECURITY, *FAST))
        assert "Traceback" not in log
    finally:
        stack.stop()
