"""WebSocket slots per client (addon/sockets/slots.py), in one process;
across proxies on one Redis: tests/e2e (real redis-server)."""

from __future__ import annotations

from addon.sockets.slots import LEASE_S, SocketSlots


def test_a_client_holds_at_most_cap_sockets_and_a_close_frees_one() -> None:
    t = [1000.0]
    slots = SocketSlots(clock=lambda: t[0])
    assert all(slots.acquire("c", f"s{i}", 3) for i in range(3))
    assert slots.acquire("c", "s3", 3) is False
    assert slots.acquire("other", "o1", 3) is True  # another client is not affected
    slots.release("s1")
    assert slots.acquire("c", "s3", 3) is True
    assert slots.held("c") == 3


def test_a_slot_nobody_renews_runs_out() -> None:
    t = [1000.0]
    slots = SocketSlots(clock=lambda: t[0])
    assert slots.acquire("c", "s0", 1)
    t[0] += LEASE_S + 1
    assert slots.acquire("c", "s1", 1)  # s0's lease ran out (its proxy died)


async def test_renewing_keeps_open_sockets_counted() -> None:
    t = [1000.0]
    slots = SocketSlots(clock=lambda: t[0])
    assert slots.acquire("c", "s0", 1)
    t[0] += LEASE_S - 1
    await slots.renew()
    t[0] += LEASE_S - 1
    assert slots.acquire("c", "s1", 1) is False


async def test_a_slot_whose_socket_never_opened_is_given_back() -> None:
    t = [1000.0]
    slots = SocketSlots(clock=lambda: t[0])
    assert slots.acquire("c", "open", 2) and slots.acquire("c", "gone", 2)
    assert slots.acquire("c", "third", 2) is False
    t[0] += 1
    await slots.renew({"open"})  # too young to judge: the handshake may still finish
    assert slots.held("c") == 2
    t[0] += LEASE_S / 3
    await slots.renew({"open"})  # "gone" never opened: its client left mid-handshake
    assert slots.held("c") == 1
    assert slots.acquire("c", "third", 2)
