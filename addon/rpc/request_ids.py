"""Request ids (``X-Request-Id``), so one complaint can be followed end to end:
the answer's header, the access log line, mitmweb's comment and the log lines
of its upstream attempts all carry the same id.

A client's own id is kept when it is sane (1..128 characters of letters,
digits and ``-_.:``: what nginx, load balancers and tracing libraries send);
anything else is replaced, so a header can never inject into a log line.
"""

from __future__ import annotations

import random
import re

_SANE = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


def new_request_id() -> str:
    """16 hex digits. Unique, not secret (an id names a call, it grants
    nothing): Python's generator, seeded from the OS and again in each forked
    worker, costs no system call per request as ``os.urandom`` did."""
    return f"{random.getrandbits(64):016x}"


def request_id_of(sent: str | None) -> str:
    """The client's id if sane, else a new one."""
    if sent is not None and _SANE.fullmatch(sent):
        return sent
    return new_request_id()
