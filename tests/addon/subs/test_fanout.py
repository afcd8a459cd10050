"""One upstream subscription feeding its client subscriptions: a subscriber never sees a
notification before the answer that names it."""

from __future__ import annotations

import json

from addon.rpc.sub_methods import (
    SUBSCRIBE,
)
from tests.addon.helpers import (
    fork_header,
)


def test_a_subscriber_never_sees_a_notification_before_its_id() -> None:
    """Notifications that arrive while the answer naming the subscription is
    still on its way wait, and go out right after it, in order."""
    from addon.subs.fanout import SharedSubscription, Subscriber

    kind = SUBSCRIBE["chain_subscribeNewHeads"]
    sh = SharedSubscription("k", "finney", kind, [], clock=lambda: 0.0, call_timeout_s=1)
    sent: list[bytes] = []
    early = Subscriber("s1", sent.append, owner=None)
    sh.subscribers["s1"] = early
    sh._deliver(fork_header(10))
    sh._deliver(fork_header(11))
    assert sent == []  # its id is not sent yet
    sh.greet(early)
    assert [json.loads(b)["params"]["result"]["number"] for b in sent] == ["0xa", "0xb"]
    late = Subscriber("s2", sent.append, owner=None)
    sh.subscribers["s2"] = late
    sent.clear()
    sh.greet(late)  # nothing waited: the current head, as from a node
    assert [json.loads(b)["params"] for b in sent] == [
        {"subscription": "s2", "result": fork_header(11)}
    ]
