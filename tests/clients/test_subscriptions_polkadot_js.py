"""polkadot.js (``@polkadot/api`` 16.5.6) over ``WsProvider`` through chainproxy's
WebSocket, on chopsticks: ``ApiPromise.create`` (it subscribes to the runtime
version at start), ``query.system.number``, ``rpc.chain.subscribeNewHeads`` and
``subscribeFinalizedHeads`` (chopsticks finalizes each block it makes) receive
every block made with ``dev_newBlock`` (straight to chopsticks: the proxy
refuses ``dev_*``), and keep doing so, once each and in order, on the same
subscription, when the endpoint feeding the proxy's upstream subscription dies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.clients.chopsticks_stack import ChainStack
from tests.clients.subscriptions import (
    assert_chain,
    subscription_moves,
    wait_moves,
    wait_ws_synced,
)
from tests.e2e.helpers import next_client_ip

if TYPE_CHECKING:
    from tests.clients.conftest import NodeSession

SCRIPT = "polkadot_subs.mjs"


def heads_until(session: NodeSession, best: int, into: dict[str, list[dict[str, Any]]]) -> None:
    """Read head steps until both kinds reached ``best`` (each wait bounded)."""
    while min((h[-1]["number"] if h else -1) for h in into.values()) < best:
        step = session.next_step(timeout=30)
        assert step["step"] == "head", step
        into[step["kind"]].append(step)


def stop(session: NodeSession) -> dict[str, Any]:
    """Unsubscribe and disconnect; what the client's socket saw."""
    session.send_line("stop")
    steps = session.steps(timeout=30)
    assert "head" not in steps, steps  # nothing was left unread
    return steps["summary"]


def start_heads(chain: ChainStack, polkadot_js: Any) -> tuple[NodeSession, dict[str, Any]]:
    wait_ws_synced(chain)
    session = polkadot_js("heads", chain.ws_rpc_url, next_client_ip(), SCRIPT)
    ready = session.next_step(timeout=60)
    assert ready["step"] == "ready", ready
    return session, ready


def test_polkadot_js_follows_new_and_finalized_heads_over_websocket(
    both_endpoints: ChainStack, polkadot_js: Any
) -> None:
    chain = both_endpoints
    start = chain.node.best()
    session, ready = start_heads(chain, polkadot_js)
    assert ready["systemNumber"] == start  # api.query.system.number() over the socket
    assert (ready["specName"], ready["specVersion"]) == ("statemine", 900)

    heads: dict[str, list[dict[str, Any]]] = {"new": [], "finalized": []}
    heads_until(session, start, heads)  # the current head first, as a node sends it
    best = chain.node.new_blocks(3)
    heads_until(session, best, heads)

    for kind in ("new", "finalized"):
        numbers = [h["number"] for h in heads[kind]]
        assert numbers == list(range(start, best + 1)), (kind, numbers)
        assert_chain(chain, numbers, [h["hash"] for h in heads[kind]])
    wire = stop(session)
    assert (wire["opened"], wire["closed"], wire["disconnects"], wire["errors"]) == (1, 0, 0, [])
    assert wire["sent"]["state_subscribeRuntimeVersion"] == 1  # ApiPromise's own
    for method, kind in (("chain_newHead", "new"), ("chain_finalizedHead", "finalized")):
        assert len(wire["subscriptions"][method]) == 1  # one subscription id each
        assert wire["notifications"][method] == len(heads[kind])  # nothing unseen


def test_polkadot_js_subscription_survives_its_endpoint_dying(
    both_endpoints: ChainStack, polkadot_js: Any
) -> None:
    """Each front is stopped in turn (the proxy's upstream subscriptions are on one
    of them, and on the other after the first stop if it was that one): blocks
    made while the front is down and after arrive once each, in order, on the
    client's one subscription, its one socket never closed."""
    chain = both_endpoints
    start = chain.node.best()
    session, _ = start_heads(chain, polkadot_js)
    heads: dict[str, list[dict[str, Any]]] = {"new": [], "finalized": []}
    heads_until(session, start, heads)
    best = chain.node.new_blocks(2)
    heads_until(session, best, heads)

    moves = [subscription_moves(chain)]
    for front in chain.fronts:
        front.stop()
        chain.node.new_blocks(1)  # while the proxy may still be moving
        best = chain.node.new_blocks(2)
        heads_until(session, best, heads)
        moves.append(wait_moves(chain, moves[-1], timeout=5))
        if front is chain.fast:  # the slow one stays down: the fixture restores it
            front.start()
            chain.wait_all_synced()
            wait_ws_synced(chain)

    for kind in ("new", "finalized"):
        numbers = [h["number"] for h in heads[kind]]
        assert numbers == list(range(start, best + 1)), (kind, numbers)
        assert_chain(chain, numbers, [h["hash"] for h in heads[kind]])
    # the proxy did move its upstream subscriptions: they stay where they are, so by
    # the second stop they are on that front whichever one fed them first
    assert moves[2] > moves[1], moves
    wire = stop(session)
    assert (wire["opened"], wire["closed"], wire["disconnects"], wire["errors"]) == (1, 0, 0, [])
    for method, kind in (("chain_newHead", "new"), ("chain_finalizedHead", "finalized")):
        assert len(wire["subscriptions"][method]) == 1  # the same id throughout
        assert wire["notifications"][method] == len(heads[kind])  # no duplicate


def test_a_runtime_version_subscriber_gets_the_current_version_at_once(
    both_endpoints: ChainStack, polkadot_js: Any
) -> None:
    """A node answers ``state_subscribeRuntimeVersion`` with the current version at
    once; chopsticks sends that first notification *before* the answer carrying the
    subscription id (polkadot.js holds such early notifications until the id is
    known). Straight to chopsticks the callback fires; through the proxy it must too."""
    chain = both_endpoints
    wait_ws_synced(chain)
    direct = polkadot_js("runtime", chain.fast.ws_url, next_client_ip(), SCRIPT).steps()["runtime"]
    assert direct["received"] and direct["specVersion"] == 900, direct

    steps = polkadot_js("runtime", chain.ws_rpc_url, next_client_ip(), SCRIPT).steps()
    got = steps["runtime"]
    assert got["received"], got
    assert (got["specName"], got["specVersion"]) == ("statemine", 900)
    assert len(got["wire"]["subscriptions"]["state_runtimeVersion"]) == 1
