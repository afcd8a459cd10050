"""Judging one upstream answer: keep it, try another upstream, or give up (pure).

* ``hard``: the upstream failed (transport, HTTP 5xx/429, a body that is not a
  JSON-RPC answer to what was sent, an internal error). Try another; if all
  fail, the client gets 502 with the attempts.
* ``soft``: a valid answer that another upstream may answer better (``null``
  for a block a lagging node has not seen, "State already discarded" from a
  pruned node, an unknown block, another block than the hash asked for). Try
  another; if none does better, the last soft answer is what the client gets
  (and it is never cached).
* ``ok``: a deterministic answer, including the upstream's own JSON-RPC error
  for invalid params or an unknown method. Never retried.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from addon.chain.header_hash import is_other_genesis
from addon.rpc.jsonrpc import Call, loads

Verdict = Literal["ok", "soft", "hard"]

_HASH_PINNED_NULLABLE = frozenset({"chain_getBlock", "chain_getHeader"})
# how nodes say they do not have a block: Substrate's UnknownBlock ("Header was
# not found in the database"), and the plainer words of other servers
_UNKNOWN_BLOCK = ("unknownblock", "header was not found", "unknown block", "block not found")


@dataclass(frozen=True, slots=True)
class Assessment:
    verdict: Verdict
    reason: str = ""
    answers: tuple[dict[str, Any], ...] | None = None  # one per call sent, in order
    prefer_archive: bool = False


def judge_answer(call: Call, answer: dict[str, Any], tip: int | None) -> tuple[Verdict, str]:
    error = answer.get("error")
    if error is not None:
        message = str(error.get("message", "")) if isinstance(error, dict) else str(error)
        code = error.get("code") if isinstance(error, dict) else None
        low = message.lower()
        if "state already discarded" in low:
            return "soft", "state-discarded"
        if any(m in low for m in _UNKNOWN_BLOCK):
            return "soft", "unknown-block"
        if code == -32603 or low.startswith("internal error"):
            return "hard", "upstream-internal"
        if code in (-32005, -32029) or "too many requests" in low or "rate limit" in low:
            return "hard", "rate-limited"
        return "ok", ""
    result = answer.get("result")
    heights = call.facts.heights  # chain_getBlockHash(n…)
    pinned = call.facts.hash_at(0) if call.method in _HASH_PINNED_NULLABLE else None
    if result is None:
        if heights and tip is not None and any(n <= tip for n in heights):
            return "soft", "null-lagging"
        if pinned is not None:
            return "soft", "null-pinned"
    elif pinned is not None and is_other_genesis(call.method, pinned, result):
        # chopsticks answers a block hash it does not know (another fork's) with
        # its genesis block instead of null. A block #0 that does not hash to the
        # hash asked for is not that block: like null, try an upstream that knows it.
        return "soft", "wrong-block"
    elif isinstance(result, list) and heights and tip is not None:
        if any(r is None and n <= tip for r, n in zip(result, heights, strict=False)):
            return "soft", "null-lagging"
    return "ok", ""


NO_STATE = frozenset({"state-discarded", "unknown-block"})


def no_state(call: Call, answer: dict[str, Any], tip: int | None) -> str | None:
    """The verdict's reason when ``answer`` is a node saying it has no state
    (or no block) for what ``call`` asked; else None."""
    if "error" not in answer:
        return None
    reason = judge_answer(call, answer, tip)[1]
    return reason if reason in NO_STATE else None


def _valid_answer(obj: Any) -> bool:
    if not isinstance(obj, dict) or "id" not in obj:
        return False
    if "result" in obj:
        return True
    return isinstance(obj.get("error"), dict | str)


def assess(
    status: int, body: bytes, calls: Sequence[Call], *, is_batch: bool, tip: int | None = None
) -> Assessment:
    """Judge an upstream's answer to ``calls``, sent with ids 0..n-1."""
    if status == 429:
        return Assessment("hard", "rate-limited")
    if status >= 500:
        return Assessment("hard", f"http-{status}")
    try:
        doc = loads(body)
    except (ValueError, RecursionError):
        return Assessment("hard", "invalid-body" if status < 300 else f"http-{status}")
    answers = _match(doc, len(calls), is_batch)
    if answers is None:
        return Assessment("hard", "invalid-body" if status < 300 else f"http-{status}")
    soft_reason = ""
    prefer_archive = False
    for call, answer in zip(calls, answers, strict=True):
        verdict, reason = judge_answer(call, answer, tip)
        if verdict == "hard":
            return Assessment("hard", reason)
        if verdict == "soft":
            soft_reason = soft_reason or reason
            prefer_archive = prefer_archive or reason == "state-discarded"
    if soft_reason:
        return Assessment("soft", soft_reason, answers, prefer_archive)
    return Assessment("ok", "", answers)


def _match(doc: Any, n: int, is_batch: bool) -> tuple[dict[str, Any], ...] | None:
    """The answers in the order of the calls, or None if they do not line up."""
    if not is_batch:
        ok = _valid_answer(doc) and doc["id"] == 0 and not isinstance(doc["id"], bool)
        return (doc,) if ok else None
    if not isinstance(doc, list) or len(doc) != n:
        return None
    by_id: dict[int, dict[str, Any]] = {}
    for obj in doc:
        if not _valid_answer(obj):
            return None
        i = obj["id"]
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n or i in by_id:
            return None
        by_id[i] = obj
    return tuple(by_id[i] for i in range(n))
