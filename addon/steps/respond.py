"""The last step: the call's reply (200 with the answers, the
``X-Cache``/``X-Chainproxy-*`` headers and Metagraphed's ``x-metagraph-rpc-*``,
or the forward's failure status for a single call); ``addon/pipeline/reply.py``
delivers it."""

from __future__ import annotations

from addon.pipeline.context import Reply, RpcContext


def respond(rpc: RpcContext, rt: object) -> None:
    assert rpc.parsed is not None
    if rpc.error_status is not None and not rpc.parsed.is_batch:
        result = rpc.result
        if result is not None and result.kind == "capacity":  # a policy: it says when
            retry = (("Retry-After", str(result.retry_after)),)
            rpc.reply = Reply(rpc.error_status, rpc.answers[0], "refused", retry)
            return
        rpc.reply = Reply(rpc.error_status, rpc.answers[0], "error", _retry_after(rpc.answers[0]))
        return
    # x-metagraph-rpc-*: Metagraphed's names for the same facts, read by its clients.
    headers = [("X-Cache", rpc.cache), ("x-metagraph-rpc-cache", rpc.cache.lower())]
    if rpc.upstream:
        headers.append(("X-Chainproxy-Upstream", rpc.upstream))
        headers.append(("X-Chainproxy-Attempts", str(len(rpc.attempts))))
        headers.append(("x-metagraph-rpc-endpoint-id", rpc.upstream))
        headers.append(("x-metagraph-rpc-provider", rpc.provider or ""))
        headers.append(("x-metagraph-rpc-attempts", str(len(rpc.attempts))))
    if rpc.pinned:
        headers.append(("X-Chainproxy-Pinned", rpc.pinned))
    if rpc.pin_missed:  # pinned, no node knew the head: answered unpinned
        headers.append(("X-Chainproxy-Pinned", "missed"))
    if rpc.coalesced:
        headers.append(("X-Chainproxy-Coalesced", "1"))
    if rpc.hedged:
        headers.append(("X-Chainproxy-Hedged", "1"))
    doc = rpc.answers if rpc.parsed.is_batch else rpc.answers[0]
    rpc.reply = Reply(200, doc, "ok", tuple(headers))


def _retry_after(answer: object) -> tuple[tuple[str, str], ...]:
    """A 502/504 that names nodes pausing at their own Retry-After says when
    the first takes calls again (``data.retry_after``), as a header too."""
    error = answer.get("error") if isinstance(answer, dict) else None
    data = error.get("data") if isinstance(error, dict) else None
    retry = data.get("retry_after") if isinstance(data, dict) else None
    return (("Retry-After", str(retry)),) if isinstance(retry, int) else ()
