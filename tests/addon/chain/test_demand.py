"""What clients read at every block: a read becomes a pre-warm candidate once
enough distinct clients asked it at each recent block, the dearest first, and
stops being one when they stop; what the pre-warm fetched is counted used or
wasted."""

from __future__ import annotations

from addon.chain.demand import MAX_SHAPES, Demand
from addon.rpc.jsonrpc import Call

DYNAMIC = Call(1, "state_call", ["SubnetInfoRuntimeApi_get_all_dynamic_info", "0x"])
NEURONS = Call(2, "state_call", ["NeuronInfoRuntimeApi_get_neurons_lite", "0x0100"])
STORAGE = Call(3, "state_getStorage", ["0x01"])


def _ask(d: Demand, call: Call, block: int, clients: int, expected: int = 0) -> None:
    for c in range(clients):
        d.note("finney", Call(c, call.method, call.params), block, f"10.0.0.{c}", expected)


def test_two_clients_at_each_of_the_last_two_blocks_make_a_candidate() -> None:
    d = Demand(max_reads=16)
    _ask(d, DYNAMIC, 100, 2)
    assert d.candidates("finney", 101) == []  # one block is not a habit yet
    _ask(d, DYNAMIC, 101, 2)
    assert [c.method for c in d.candidates("finney", 102)] == ["state_call"]
    _ask(d, STORAGE, 100, 1)
    _ask(d, STORAGE, 101, 5)  # one client at block 100: not every block
    assert len(d.candidates("finney", 102)) == 1
    assert d.candidates("test", 102) == []  # per network


def test_one_client_asking_again_and_again_is_not_demand() -> None:
    d = Demand(max_reads=16)
    for block in range(100, 110):
        for _ in range(10):
            d.note("finney", STORAGE, block, "10.0.0.1")
    assert d.candidates("finney", 110) == []


def test_the_dearest_reads_first_at_most_max_reads() -> None:
    d = Demand(max_reads=2)
    for block in (100, 101):
        _ask(d, STORAGE, block, 4)  # more clients, but small
        _ask(d, DYNAMIC, block, 2, expected=200_000)  # fewer, but ~200 KiB each
        _ask(d, NEURONS, block, 2, expected=50_000)
    picked = d.candidates("finney", 102)
    assert [c.params[0] for c in picked] == [DYNAMIC.params[0], NEURONS.params[0]]


def test_demand_that_stops_is_forgotten() -> None:
    d = Demand(max_reads=16)
    for block in (100, 101):
        _ask(d, DYNAMIC, block, 3)
    assert d.candidates("finney", 102)
    assert d.candidates("finney", 105) == []  # nobody asked at 103 or 104
    _ask(d, DYNAMIC, 105, 3)
    assert d.candidates("finney", 106) == []  # it starts over


def test_off_means_nothing_is_kept() -> None:
    d = Demand(max_reads=0)
    _ask(d, DYNAMIC, 100, 3)
    _ask(d, DYNAMIC, 101, 3)
    assert not d.enabled and d.candidates("finney", 102) == []


def test_shapes_are_bounded() -> None:
    d = Demand(max_reads=16)
    for i in range(MAX_SHAPES + 50):
        d.note("finney", Call(i, "state_getStorage", [f"0x{i:04x}"]), 100, "c")
    assert len(d._shapes["finney"]) == MAX_SHAPES


def test_used_and_wasted_are_counted_once() -> None:
    d = Demand(max_reads=16)
    d.warmed("finney", ("k1", "k2"))
    assert d.touch("finney", ("k1",)) == 1
    assert d.touch("finney", ("k1",)) == 0  # used once is enough
    assert d.rotate("finney") == 1  # k2: no client came
    assert d.rotate("finney") == 0


def test_metadata_is_never_prewarmed() -> None:
    d = Demand(max_reads=16)
    meta = Call(9, "state_getMetadata", [])
    for block in (100, 101):
        _ask(d, meta, block, 5, expected=500_000)
    assert d.candidates("finney", 102) == []  # its per-runtime entry answers it
