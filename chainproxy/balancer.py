"""HAProxy's runtime API, on the admin socket the launcher's config opens
(``chainproxy/workers.py``): what a rolling restart needs to move a worker in
and out of the rotation without reloading HAProxy.

* ``enable(server, port)``: point a spare slot at a new worker and take it
  into the rotation (it is UP at once; the health checks go on).
* ``set_state(server, "drain")``: no new call goes to it; calls and
  WebSocket tunnels already on it stay until the worker ends them.
* ``set_state(server, "maint")``: out of the rotation and unchecked (a
  spare slot again).

The protocol is one command per connection, a text answer, the connection
closed by HAProxy. A command HAProxy refuses answers with a message; the
commands used here answer nothing (or an informational line for ``addr``),
so what counts is the server's status afterwards (``status``)."""

from __future__ import annotations

import csv
import io
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from chainproxy.workers import BACKEND

STATES = ("ready", "drain", "maint")


class BalancerError(RuntimeError):
    """The runtime API could not be reached, or refused a command."""


def parse_stat(text: str, backend: str = BACKEND) -> dict[str, dict[str, str]]:
    """``show stat`` (CSV with a ``# `` header) → server name → its columns,
    for the servers of ``backend`` (not its FRONTEND/BACKEND summary rows)."""
    lines = text.strip().splitlines()
    if not lines or not lines[0].startswith("# "):
        return {}
    rows = csv.DictReader(io.StringIO("\n".join([lines[0][2:], *lines[1:]])))
    return {
        row["svname"]: row
        for row in rows
        if row.get("pxname") == backend and row.get("svname") not in ("FRONTEND", "BACKEND")
    }


@dataclass
class Balancer:
    socket_path: Path
    backend: str = BACKEND
    timeout_s: float = 2.0

    def command(self, line: str) -> str:
        """One runtime API command; its answer."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(self.timeout_s)
                s.connect(str(self.socket_path))
                s.sendall(line.encode() + b"\n")
                chunks = []
                while chunk := s.recv(65536):
                    chunks.append(chunk)
        except OSError as e:
            raise BalancerError(f"HAProxy's runtime API at {self.socket_path}: {e}") from None
        return b"".join(chunks).decode(errors="replace")

    def servers(self) -> dict[str, dict[str, str]]:
        return parse_stat(self.command("show stat"), self.backend)

    def status(self, server: str) -> str:
        """``UP``, ``DOWN``, ``DRAIN``, ``MAINT``, … (``UP 1/2`` while checks settle)."""
        row = self.servers().get(server)
        if row is None:
            raise BalancerError(f"HAProxy has no server {self.backend}/{server}")
        return row.get("status", "")

    def sessions(self, server: str) -> int:
        """Connections HAProxy has open to ``server`` now (WebSocket tunnels included)."""
        row = self.servers().get(server, {})
        return int(row.get("scur") or 0)

    def set_state(self, server: str, state: str) -> None:
        assert state in STATES, state
        answer = self.command(f"set server {self.backend}/{server} state {state}").strip()
        if answer:
            raise BalancerError(f"set server {server} state {state}: {answer}")

    def enable(self, server: str, port: int, timeout_s: float = 5.0) -> None:
        """Point slot ``server`` at 127.0.0.1:``port`` and take it into the
        rotation; returns once HAProxy has it UP."""
        self.command(f"set server {self.backend}/{server} addr 127.0.0.1 port {port}")
        self.set_state(server, "ready")
        # Leaving maintenance it is UP at once; this makes sure the check agrees
        # (the worker answered /healthz a moment ago).
        self.command(f"set server {self.backend}/{server} health up")
        deadline = time.monotonic() + timeout_s
        while not (status := self.status(server)).startswith("UP"):
            if time.monotonic() > deadline:
                raise BalancerError(f"{server} (port {port}) not UP in HAProxy: {status}")
            time.sleep(0.05)
