"""Client WebSocket keep-alive: a ping every interval, at most one
outstanding, any pong answers it, a ping unanswered for the timeout closes
the socket; the loop's round over the open sockets (fake clock)."""

from __future__ import annotations

from dataclasses import dataclass, field

from addon.sockets.keepalive import Keepalive, Pinger
from tests.fakes import FakeClock


def test_a_ping_each_interval_and_the_close_after_an_unanswered_one() -> None:
    k = Keepalive(last=0.0)
    assert k.tick(29.9, 30, 30) is None
    assert k.tick(30, 30, 30) == "ping"
    assert k.pinged(30) == b"1"
    assert k.tick(59.9, 30, 30) is None  # outstanding: no second ping, not dead yet
    k.ponged()
    assert k.tick(59.9, 30, 30) is None  # answered: the next one an interval after the last
    assert k.tick(60, 30, 30) == "ping" and k.pinged(60) == b"2"
    assert k.tick(89.9, 30, 30) is None
    assert k.tick(90, 30, 30) == "dead"


def test_no_pings_with_interval_zero() -> None:
    k = Keepalive(last=0.0)
    assert k.tick(10_000, 0, 30) is None


@dataclass
class Sock:
    keepalive: Keepalive
    open: bool = True
    pings: list[bytes] = field(default_factory=list)
    answers: bool = True


def test_the_loop_pings_the_open_sockets_and_closes_the_silent_one() -> None:
    clock = FakeClock(0.0)
    good, gone, closed = (
        Sock(Keepalive(0.0)),
        Sock(Keepalive(0.0), answers=False),
        Sock(Keepalive(0.0), open=False),
    )
    dead: list[Sock] = []

    def ping(s: Sock, payload: bytes) -> None:  # type: ignore[override]
        s.pings.append(payload)
        if s.answers:
            s.keepalive.ponged()

    pinger = Pinger(
        lambda: [good, gone, closed],
        lambda: (1.0, 2.0),
        ping,
        dead.append,
        clock,  # type: ignore[arg-type]
    )
    assert pinger.period() == 0.25
    for _ in range(12):  # 3 s in rounds of 0.25 s
        clock.advance(0.25)
        pinger.tick()
    assert good.pings == [b"1", b"2", b"3"] and dead == [gone]
    assert gone.pings == [b"1"]  # one ping outstanding at most
    assert closed.pings == []  # a socket already closing is left alone
