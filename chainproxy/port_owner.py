"""Whose is a listening port: the check that a child we wait for is the one answering.

``free_port()`` picks a port nothing listens on *now*; between that and the
child's ``bind`` another process (a parallel test run, another stack) can take
it. The child then exits with "address already in use", but a wait that only
asks "does the port answer?" may see the other process answer first and go on
with a stack whose node is someone else's. So a wait also asks the kernel
(Linux ``/proc``) whether a process of the child's session holds the listening
socket. Where ``/proc`` cannot tell (another OS, no permission), it says yes:
the plain answer check is all there is then.
"""

from __future__ import annotations

import os
from pathlib import Path

_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp*
PROC = Path("/proc")


def listening_inodes(port: int, proc: Path = PROC) -> set[str] | None:
    """The socket inodes listening on ``port`` (any address), None if unknown."""
    found: set[str] = set()
    readable = False
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[3] != _LISTEN:
                continue
            if int(cols[1].rsplit(":", 1)[1], 16) == port:
                found.add(cols[9])
    return found if readable else None


def _session_of(pid_dir: Path) -> int | None:
    try:
        stat = (pid_dir / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session …": comm may hold spaces and parentheses
    fields = stat.rpartition(")")[2].split()
    return int(fields[3]) if len(fields) > 3 else None


def _holds(pid_dir: Path, sockets: set[str]) -> bool:
    try:
        fds = list((pid_dir / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in sockets:
            return True
    return False


def session_listens(session: int, port: int, proc: Path = PROC) -> bool:
    """Whether a process of ``session`` (a child spawned with a session of its
    own: its pid) holds the socket listening on ``port``; True when unknowable."""
    inodes = listening_inodes(port, proc)
    if inodes is None:
        return True
    if not inodes:
        return False
    for pid_dir in proc.iterdir():
        if pid_dir.name.isdigit() and _session_of(pid_dir) == session:
            if _holds(pid_dir, inodes):
                return True
    return False
