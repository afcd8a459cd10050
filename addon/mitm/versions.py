"""The mitmproxy and wsproto versions chainproxy's internals were tested with,
and what an untested one switches off: chainproxy refuses to start on one.

Several of chainproxy's bounds exist only as patches of mitmproxy's internals
(``limits.py``, ``idle.py``) and wsproto's (``limits.py``, ``ws_reads.py``),
and so do its fast paths (``internals.py``, ``ws_reads.py``). Each is written
against the versions in ``TESTED`` and used only there: on any other version
every one of them is off (``KNOWN`` is False). The bounds being off is a
security matter, not a matter of speed, so chainproxy then stops mitmproxy at
start-up (``guard``, called by the ``Settings`` addon before it reads any
config): one line naming the versions and every mechanism that would be off,
the bounds first, and exit code ``REFUSED_EXIT``. An operator who accepts it
sets ``chainproxy_allow_untested=true``: chainproxy then starts, names what is
off in one warning line, and reports each in ``/metrics``
(``chainproxy_mechanism_off{mechanism}``, from ``mechanisms_off``).

``decide`` is the pure decision (tests/addon/mitm/test_versions.py);
tests/e2e/test_untested_mitmproxy_e2e.py fakes the version on a real mitmdump.
The pins in pyproject.toml and ``TESTED`` move together.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import wsproto
from mitmproxy import exceptions
from mitmproxy import version as mitmproxy_version

log = logging.getLogger("chainproxy")

OPTION = "chainproxy_allow_untested"
REFUSED_EXIT = 2  # as a config error of the sidecar: a restart will not fix it

# package -> the versions the internals were written and tested against
TESTED: Mapping[str, frozenset[str]] = {
    "mitmproxy": frozenset({"12.2.3"}),
    "wsproto": frozenset({"1.3.2"}),
}
INSTALLED: Mapping[str, str] = {
    "mitmproxy": mitmproxy_version.VERSION,
    "wsproto": getattr(wsproto, "__version__", "unknown"),
}


@dataclass(frozen=True)
class Mechanism:
    key: str  # the ``mechanism`` label of chainproxy_mechanism_off
    name: str  # in the log lines
    security: bool  # a bound on what clients can do (else: speed only)


# Every mechanism that relies on the internals, the security bounds first.
MECHANISMS: tuple[Mechanism, ...] = (
    Mechanism("header_bound", "431 header bound", True),
    Mechanism("slow_request_deadline", "408 slow-request deadline", True),
    Mechanism("json_413", "413 JSON body bound", True),
    Mechanism("ws_message_bound", "WebSocket message bound", True),
    Mechanism("leaked_socket_fix", "leaked-socket fix", True),
    Mechanism("idle_closing", "idle closing", True),
    Mechanism("fast_dispatch", "fast dispatch", False),
    Mechanism("direct_responses", "direct responses", False),
    Mechanism("ws_backpressure", "WebSocket back-pressure", False),
    Mechanism("ws_direct_frames", "WebSocket direct frames", False),
    Mechanism("ws_direct_reads", "WebSocket direct reads", False),
    Mechanism("http_direct_reads", "HTTP direct reads", False),
)


@dataclass(frozen=True)
class Verdict:
    untested: tuple[str, ...]  # "mitmproxy 12.9.1 (tested: 12.2.3)", one per package
    off: tuple[Mechanism, ...]  # what is off on these versions (all or nothing)
    refused: bool  # chainproxy must not start

    def line(self) -> str:
        """The one line said at start: the refusal, or what an operator accepted."""
        if not self.untested:
            return ""
        names = " and ".join(self.untested)
        bounds = ", ".join(m.name for m in self.off if m.security)
        fast = ", ".join(m.name for m in self.off if not m.security)
        if self.refused:
            return (
                f"chainproxy refuses to start: untested {names} would switch off the security"
                f" bounds ({bounds}) and the fast paths ({fast}). Install the tested versions"
                f" (pyproject.toml pins them), or accept this with --set {OPTION}=true"
            )
        return (
            f"chainproxy runs on untested {names}, accepted by {OPTION}: security bounds"
            f" off: {bounds}; fast paths off: {fast}"
        )


def untested(installed: Mapping[str, str], tested: Mapping[str, frozenset[str]]) -> list[str]:
    """Each package whose installed version is not a tested one, with both."""
    return [
        f"{pkg} {installed.get(pkg, 'unknown')} (tested: {', '.join(sorted(versions))})"
        for pkg, versions in tested.items()
        if installed.get(pkg) not in versions
    ]


def decide(
    installed: Mapping[str, str],
    allow: bool = False,
    tested: Mapping[str, frozenset[str]] = TESTED,
) -> Verdict:
    """Pure: the versions (and the operator's option) -> start or not, and what
    is off. Every mechanism is off when any package is untested: the bounds
    patch mitmproxy's WebSocket layer, which is wsproto's ``Connection``."""
    bad = tuple(untested(installed, tested))
    return Verdict(untested=bad, off=MECHANISMS if bad else (), refused=bool(bad) and not allow)


KNOWN = not untested(INSTALLED, TESTED)  # every internal is used only when True


def mechanisms_off() -> dict[str, int]:
    """The usage batches' ``mechanisms_off`` gauge (``common/metrics_wire.py``):
    1 per mechanism off in this process (it runs, so an operator accepted it)."""
    return {m.key: 1 for m in decide(INSTALLED).off}


HELP = (
    "Start on a mitmproxy or wsproto version chainproxy was not tested with, with its "
    "request bounds (431, 408, JSON 413, WebSocket message size, idle closing) and fast "
    "paths off (docs/SECURITY.md). Read at start."
)

_accepted = False  # this process started on untested versions, accepted (said once)


def guard(allow: bool, installed: Mapping[str, str] | None = None) -> Verdict:
    """At start-up (the ``Settings`` addon's first ``configure``, before any
    config is read): on untested versions, one error line and ``SystemExit``
    unless ``allow``; accepted, one warning line naming what is off (once per
    process, however often the script reloads). Later, on a running untested
    proxy, turning ``OPTION`` off is refused: it is read at start."""
    global _accepted
    verdict = decide(INSTALLED if installed is None else installed, allow)
    if not verdict.untested:
        return verdict
    if verdict.refused:
        if _accepted:  # running already
            raise exceptions.OptionsError(
                f"{OPTION} is read at start: restart to stop running on untested versions"
            )
        log.error("%s", verdict.line())
        raise SystemExit(REFUSED_EXIT)  # before any config is read; SystemExit: no traceback
    if not _accepted:
        _accepted = True
        log.warning("%s", verdict.line())
    return verdict
