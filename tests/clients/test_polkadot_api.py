"""polkadot-api (PAPI 2.2.2, ``createClient(getWsProvider(url))``, no descriptors)
through chainproxy's WebSocket on chopsticks, over Substrate's new JSON-RPC spec:
PAPI speaks ``chainHead_v1_*`` when the server's ``rpc_methods`` lists
``chainHead_v1_follow`` (chopsticks 1.5.1 does) and the legacy methods
otherwise, so each test asserts it did use the new spec.

Each test runs ``js/papi_session.mjs`` twice at once: straight to the chopsticks
node (the reference, which no front stands between) and through the proxy. The
storage and runtime-API answers (``chainHead_v1_storage``/``_call``: metadata,
``System.Number``, ``System.Account``, ``Timestamp.Now``, ``Core_version``,
``AccountNonceApi_account_nonce``) must be the direct ones at the same block; the
finalized, best and new-block streams must hold every block made (one at a time,
``dev_newBlock`` straight to chopsticks), once each, in order, with the node's
hashes; and through the proxy there must be no follow ``stop``, no second follow,
no error and one socket, never closed, also while the endpoints die one after
the other. The script runs on its own too (``--drive``, docs/OPERATIONS.md,
"Real clients")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.clients.chopsticks_stack import ChainStack, ws_url
from tests.clients.subscriptions import assert_chain, wait_ws_synced
from tests.e2e.helpers import next_client_ip

if TYPE_CHECKING:
    from tests.clients.conftest import NodeSession

SCRIPT = "papi_session.mjs"
KINDS = ("finalized", "best", "new")
# the answers compared, direct against through the proxy (at the same block)
ANSWERS = (
    "at",
    "atNumber",
    "metadataLength",
    "metadataSha256",
    "systemNumber",
    "aliceAccount",
    "timestampNow",
    "ss58Prefix",
    "coreVersionHex",
    "coreVersion",
    "aliceNonceHex",
    "aliceNonce",
)


@pytest.fixture(autouse=True)
def fresh_proxy_after(both_endpoints: ChainStack) -> Iterator[None]:
    """A fresh mitmdump after each test, before ``both_endpoints`` restores the
    chain: PAPI's heavy calls (``Metadata_metadata``, ~150 kB, a runtime call
    slow on chopsticks) teach the proxy's latency estimate that the endpoint
    which ran them is slow, so it prefers the other one for about a minute, and
    the next test would wait that long for the proxy to settle on the fast one."""
    yield
    both_endpoints.restart_proxy()


class Papi:
    """One papi_session.mjs "follow" run: its block steps, by stream."""

    def __init__(self, session: NodeSession, name: str) -> None:
        self.session = session
        self.name = name
        self.seen: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}

    def ready(self) -> dict[str, Any]:
        return self._next("ready")

    def _next(self, name: str) -> dict[str, Any]:
        """The next step that is not a block (block steps are filed)."""
        while (step := self.session.next_step(timeout=30))["step"] == "block":
            self.seen[step["kind"]].append(step)
        assert step["step"] == name, (self.name, step)
        return step

    def last(self, kind: str) -> int:
        return self.seen[kind][-1]["number"] if self.seen[kind] else -1

    def until(self, number: int) -> None:
        """Read block steps until the finalized and the best stream reached ``number``."""
        while min(self.last("finalized"), self.last("best")) < number:
            step = self.session.next_step(timeout=30)
            assert step["step"] == "block", (self.name, step)
            self.seen[step["kind"]].append(step)

    def query(self) -> dict[str, Any]:
        self.session.send_line("query")
        return self._next("answers")

    def stop(self) -> dict[str, Any]:
        self.session.send_line("stop")
        summary = self._next("summary")
        assert self.session.steps(timeout=30) == {}, self.name  # then "done", exit 0
        return summary


def start(chain: ChainStack, polkadot_js: Any) -> tuple[Papi, Papi]:
    """A direct and a through-the-proxy session, both ready at the same finalized
    block (no block is made meanwhile) with the same answers."""
    wait_ws_synced(chain)
    direct = Papi(polkadot_js("follow", ws_url(chain.node.url), next_client_ip(), SCRIPT), "direct")
    proxied = Papi(polkadot_js("follow", chain.ws_rpc_url, next_client_ip(), SCRIPT), "proxied")
    reference, got = direct.ready(), proxied.ready()
    assert reference["chainHeadListed"], reference  # premise: the node offers the new spec
    assert got["chainHeadListed"], "the proxy's rpc_methods does not list chainHead_v1_follow"
    best = chain.node.best()
    assert reference["atNumber"] == reference["systemNumber"] == best, reference
    assert reference["at"] == chain.node.rpc("chain_getBlockHash", [best])
    assert_same_answers(reference, got)
    assert got["chainSpec"] == reference["chainSpec"]  # chainSpec_v1_*
    return direct, proxied


def assert_same_answers(reference: dict[str, Any], got: dict[str, Any]) -> None:
    assert reference["coreVersion"]["specVersion"] == 900, reference  # premise: decoded
    assert {k: got[k] for k in ANSWERS} == {k: reference[k] for k in ANSWERS}


def new_blocks(chain: ChainStack, count: int, *sessions: Papi) -> int:
    """Make ``count`` blocks one at a time, each seen by every session before the
    next (as on a live chain, seconds apart: one follow event each)."""
    best = chain.node.best()
    for _ in range(count):
        best = chain.node.new_blocks(1)
        for s in sessions:
            s.until(best)
    return best


def assert_streams(chain: ChainStack, summary: dict[str, Any], first: int, last: int) -> None:
    """Every stream holds blocks ``first``..``last``, once each, in order, the node's."""
    for kind in KINDS:
        blocks = summary["streams"][kind]
        numbers = [b["number"] for b in blocks]
        assert numbers == list(range(first, last + 1)), (kind, numbers)
        assert_chain(chain, numbers, [b["hash"] for b in blocks])


def assert_clean(summary: dict[str, Any]) -> None:
    """One socket, never closed or stale; one follow, never stopped; the new spec
    only; no error; PAPI warned about nothing."""
    assert summary["streamEnds"] == [], summary["streamEnds"]
    assert summary["stops"] == [], summary["stops"]
    assert summary["errors"] == [], summary["errors"]
    assert summary["warnings"] == [], summary["warnings"]
    assert summary["sockets"] == 1, summary["socketEvents"]
    assert [e["type"] for e in summary["socketEvents"]] == ["CONNECTING", "CONNECTED"], summary[
        "socketEvents"
    ]
    assert [s["type"] for s in summary["statuses"]] == ["CONNECTING", "CONNECTED"]
    sent = summary["sent"]
    assert sent.get("chainHead_v1_follow") == 1, sent
    new_spec = ("chainHead_v1_", "chainSpec_v1_", "archive_v1_", "rpc_methods")
    legacy = [m for m in sent if not m.startswith(new_spec)]
    assert legacy == [], sent  # PAPI did not fall back to the legacy methods


def assert_same_session(
    chain: ChainStack, direct: dict[str, Any], proxied: dict[str, Any], first: int, last: int
) -> None:
    assert_clean(direct)  # premise: the harness itself is sound
    assert_streams(chain, direct, first, last)
    assert_clean(proxied)
    assert_streams(chain, proxied, first, last)
    # each block was finalized once, in order, in a follow event
    hashes = [chain.node.rpc("chain_getBlockHash", [n]) for n in range(first + 1, last + 1)]
    assert direct["finalizedHashes"] == hashes
    assert proxied["finalizedHashes"] == hashes


def test_papi_follows_and_reads_over_the_new_spec(
    both_endpoints: ChainStack, polkadot_js: Any
) -> None:
    chain = both_endpoints
    first = chain.node.best()
    direct, proxied = start(chain, polkadot_js)
    last = new_blocks(chain, 3, direct, proxied)
    assert_same_answers(direct.query(), proxied.query())  # at the new finalized block
    assert_same_session(chain, direct.stop(), proxied.stop(), first, last)


def test_papi_follow_survives_each_endpoint_dying(
    both_endpoints: ChainStack, polkadot_js: Any
) -> None:
    """The front in use is stopped mid-session, then, once it is back, the other
    one: whichever endpoint fed the proxy's view of the chain died while PAPI
    followed. Blocks made right after each stop (the proxy may still be moving)
    and after reach the client once each, in order, on its one follow."""
    chain = both_endpoints
    first = chain.node.best()
    direct, proxied = start(chain, polkadot_js)
    new_blocks(chain, 2, direct, proxied)

    in_use = chain.front_by_id(chain.used_endpoint())  # the endpoint in use ...
    other = next(f for f in chain.fronts if f is not in_use)
    in_use.stop()  # ... dies
    new_blocks(chain, 2, direct, proxied)
    assert chain.used_endpoint() == other.endpoint_id  # the proxy did move
    assert_same_answers(direct.query(), proxied.query())

    in_use.start()
    chain.wait_all_synced()
    wait_ws_synced(chain)
    other.stop()  # then the other one (it stays down: the fixture restores it)
    last = new_blocks(chain, 2, direct, proxied)
    assert chain.used_endpoint() == in_use.endpoint_id
    assert_same_answers(direct.query(), proxied.query())

    assert_same_session(chain, direct.stop(), proxied.stop(), first, last)
