"""``make demo-chopsticks`` as a user meets it: it starts chopsticks, the two
endpoint fronts, the sidecar and mitmdump, prints a curl that works, makes
blocks, goes on when an endpoint is killed by hand, and Ctrl-C stops every
process it started."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.clients.helpers import LineReader, eventually, raw_post
from tests.e2e.harness import REPO, free_port
from tests.e2e.helpers import next_client_ip


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_demo_serves_a_real_chain_and_ctrl_c_stops_everything(js: Path, tmp_path: Path) -> None:
    proxy_port, sidecar_port = free_port(), free_port()
    argv = [
        sys.executable,
        "-m",
        "tests.clients.chopsticks_stack",
        "--listen-port",
        str(proxy_port),
        "--sidecar-port",
        str(sidecar_port),
        "--block-time",
        "1",
        "--dir",
        str(tmp_path),
    ]
    demo = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert demo.stdout is not None
    out = LineReader(demo.stdout)
    try:
        assert out.wait_for("Ctrl-C stops everything", timeout=120), out.text
        banner = out.text
        url = f"http://127.0.0.1:{proxy_port}/rpc/v1/assethub"
        assert f"curl -s -X POST {url}" in banner
        ports = [int(p) for p in re.findall(r"http://127\.0\.0\.1:(\d+)", banner)]
        assert proxy_port in ports and len(set(ports)) >= 4  # proxy, node, two fronts

        ip = next_client_ip()
        _, _, body = raw_post(url, "chain_getHeader", source_ip=ip)
        first = int(body["result"]["number"], 16)

        def advanced() -> bool:
            _, _, b = raw_post(url, "chain_getHeader", source_ip=ip)
            return int(b["result"]["number"], 16) > first

        assert eventually(advanced, timeout=15), "the demo makes no blocks"

        # an endpoint killed by hand, by the pid the banner prints: the demo
        # goes on (it stopped whole), and the proxy answers from the other
        fast = re.search(r"kill (\d+) \(front-fast\)", banner)
        assert fast is not None, banner
        os.kill(int(fast.group(1)), signal.SIGTERM)
        assert out.wait_for("front-fast exited: that endpoint is down", timeout=15), out.text
        for _ in range(5):
            status, _, b = raw_post(url, "chain_getHeader", source_ip=ip)
            assert status == 200 and "result" in b, (status, b)
        assert demo.poll() is None, out.text

        demo.send_signal(signal.SIGINT)  # what Ctrl-C delivers to the launcher
        assert demo.wait(30) == 0
        for port in {*ports, sidecar_port}:
            assert not _listening(port), f"port {port} still served after Ctrl-C"
    finally:
        if demo.poll() is None:  # a failed assertion: stop it the way a user would
            demo.send_signal(signal.SIGINT)
            try:
                demo.wait(30)
            except subprocess.TimeoutExpired:
                demo.kill()
                demo.wait(10)
