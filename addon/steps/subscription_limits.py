"""The subscription limits step (before the quota, so a refused subscribe takes
nothing): subscriptions need a node-wss endpoint on the network, and a socket
holds at most ``proxy.websocket.max_subscriptions`` and a client at most
``max_subscriptions_per_client`` across its sockets on this proxy (a tier may
raise it). A ``chainHead_v1_follow`` counts as one subscription."""

from __future__ import annotations

from typing import Any, Protocol

from addon.follow.book import FollowBook
from addon.pipeline.context import RpcContext, Socket
from addon.quota.quotas import Quotas
from addon.rpc.jsonrpc import (
    METHOD_NOT_FOUND,
    POLICY_REFUSED,
    Call,
    error_obj,
)
from addon.rpc.new_spec import CHAIN_HEAD_FOLLOW
from addon.rpc.sub_methods import SUBSCRIBE
from addon.subs.hub import SubscriptionHub
from common.config import Config


class SubscriptionLimitsNeeds(Protocol):
    """What the subscription_limits step reads of the runtime."""

    @property
    def config(self) -> Config: ...

    @property
    def quotas(self) -> Quotas: ...

    @property
    def subs(self) -> SubscriptionHub: ...

    @property
    def follows(self) -> FollowBook: ...


def subscription_limits(rpc: RpcContext, rt: SubscriptionLimitsNeeds) -> None:
    sock = rpc.socket
    if sock is None or rpc.parsed is None:
        return
    items = rpc.parsed.items
    opening = 0
    for i in rpc.pending():
        call = items[i]
        if not isinstance(call, Call) or (
            call.method not in SUBSCRIBE and call.method != CHAIN_HEAD_FOLLOW
        ):
            continue
        if not rt.subs.serves(sock.network):
            rpc.answers[i] = error_obj(
                call.id,
                METHOD_NOT_FOUND,
                f"subscriptions are not available on {sock.network}",
                {
                    "policy": "subscriptions",
                    "reason": f"no node-wss endpoint is configured for {sock.network}",
                },
            )
        elif (refused := over_limit(rt, sock, rpc.tier, call.id, opening)) is not None:
            rpc.answers[i] = refused
        else:
            opening += 1
    if not rpc.parsed.is_batch and rpc.answers[0] is not None:
        rpc.refuse(403, rpc.answers[0])


def over_limit(
    rt: SubscriptionLimitsNeeds, sock: Socket, tier: str | None, call_id: Any, opening: int
) -> dict[str, Any] | None:
    """The refusal of one more subscription on ``sock`` (``opening`` more are
    admitted before it in its batch), or None. Counted: what the socket and
    its client hold, and their subscribes still waiting for a node (other
    messages of theirs, sent before these were answered). The subscribe step
    asks again right before it subscribes: a message may have waited for the
    quota (Redis) while another took the last place."""
    limit = rt.config.proxy.websocket.max_subscriptions
    subs = rt.subs
    if len(sock.subscriptions) + subs.opening.get(id(sock), 0) + opening >= limit:
        return error_obj(
            call_id,
            POLICY_REFUSED,
            f"too many subscriptions on this socket (limit {limit})",
            {
                "policy": "max_subscriptions",
                "reason": "unsubscribe some, or open another socket",
                "limit": limit,
            },
        )
    client = sock.client
    per_client = _client_cap(rt, tier)
    held = subs.client_subscriptions(client) + subs.client_opening.get(client, 0)
    if held + rt.follows.client_follows(client) + opening >= per_client:
        return error_obj(
            call_id,
            POLICY_REFUSED,
            f"too many subscriptions for this client (limit {per_client} across its sockets)",
            {
                "policy": "max_subscriptions",
                "reason": "unsubscribe some: one subscription serves any number of reads",
                "limit": per_client,
            },
        )
    return None


def _client_cap(rt: SubscriptionLimitsNeeds, tier: str | None) -> int:
    found = rt.quotas.book.tiers.get(tier) if tier is not None else None
    if found is not None and found.max_subscriptions_per_client is not None:
        return found.max_subscriptions_per_client
    return rt.config.proxy.websocket.max_subscriptions_per_client
