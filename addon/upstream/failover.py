"""Judging one upstream answer: keep it, try another upstream, or give up (pure).

* ``hard``: the upstream failed (transport, HTTP 5xx/429, a body that is not a
  JSON-RPC answer to what was sent, an internal error), or refused the call
  with an error that is its own limit (``node_limit``: ``rate-limited``,
  ``work-limited``). Try another; if all fail, the client gets 502 with the
  attempts (503 ``upstream_capacity`` when every node refused for its limits).
* ``soft``: a valid answer that another upstream may answer better (``null``
  for a block a lagging node has not seen, "State already discarded" from a
  pruned node, an unknown block, another block than the hash asked for). Try
  another; if none does better, the last soft answer is what the client gets
  (and it is never cached).
* ``ok``: a deterministic answer, including the upstream's own JSON-RPC error
  for invalid params or an unknown method. Never retried.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from addon.chain.header_hash import is_other_genesis
from addon.rpc.jsonrpc import Call, loads
from addon.rpc.splice import RAW_MIN_BYTES, scan_answer

Verdict = Literal["ok", "soft", "hard"]

_HASH_PINNED_NULLABLE = frozenset({"chain_getBlock", "chain_getHeader"})
# how nodes say they do not have a block: Substrate's UnknownBlock ("Header was
# not found in the database"), and the plainer words of other servers
_UNKNOWN_BLOCK = ("unknownblock", "header was not found", "unknown block", "block not found")

# A node's own limits, said inside a JSON-RPC error (an HTTP 429 is judged
# before the body). Judged by the words, never by the code alone: the codes
# mean different things on different servers. jsonrpsee (Substrate's RPC
# server) has -32004 "subscription closed with error" (older versions), -32005
# "Batched requests are not supported by this server" and -32009 "Server is
# busy, try again later"; EIP-1474 gateways -32004 "Method not supported" and
# -32005 "Limit exceeded"; chainproxy itself answers -32004 for its policies
# (allowlist, subscription limits, API key) and -32005 "rate limit exceeded"
# for a client's quota, each with ``data.policy``. So a chainproxy upstream's
# quota refusal is that node's limit for us (rate-limited), its allowlist
# refusal is an answer (ok). The one code taken alone is -32029, what public
# RPC providers answer a rate limit with.
RATE_LIMIT_CODES = frozenset({-32029})
_RATE_WORDS = ("too many requests", "rate limit", "rate-limit", "ratelimit")
# a budget of work rather than of calls: a heavy read refused, a busy server.
# Not "limit exceeded" anywhere: a runtime's deterministic error may say so
# (every node would answer it), only EIP-1474's bare "Limit exceeded".
_WORK_WORDS = ("work limit", "server is busy", "request limit", "rpc limit")
# the attempt reasons that are a node's capacity, not its failure: the node
# pauses and its learned rate drops; when every node said one of these the
# client gets 503 upstream_capacity with Retry-After
CAPACITY = frozenset({"rate-limited", "work-limited"})


@dataclass(frozen=True, slots=True)
class Assessment:
    verdict: Verdict
    reason: str = ""
    answers: tuple[dict[str, Any], ...] | None = None  # one per call sent, in order
    prefer_archive: bool = False


def node_limit(code: Any, message: str) -> str | None:
    """``rate-limited`` or ``work-limited`` when a JSON-RPC error from a node
    is that node's own limit (another node may well answer), else None."""
    low = message.lower()
    if code in RATE_LIMIT_CODES or any(w in low for w in _RATE_WORDS):
        return "rate-limited"
    if low.startswith("limit exceeded") or any(w in low for w in _WORK_WORDS):
        return "work-limited"
    return None


def error_limit(answer: dict[str, Any]) -> str | None:
    """``node_limit`` of one answer object (None for a result)."""
    error = answer.get("error")
    if error is None:
        return None
    if isinstance(error, dict):
        return node_limit(error.get("code"), str(error.get("message", "")))
    return node_limit(None, str(error))


def no_block_state(message: str) -> str | None:
    """``state-discarded`` or ``unknown-block`` when a node's error message
    says it has not the block or its state (another node may), else None."""
    low = message.lower()
    if "state already discarded" in low:
        return "state-discarded"
    if any(m in low for m in _UNKNOWN_BLOCK):
        return "unknown-block"
    return None


def judge_answer(call: Call, answer: dict[str, Any], tip: int | None) -> tuple[Verdict, str]:
    error = answer.get("error")
    if error is not None:
        message = str(error.get("message", "")) if isinstance(error, dict) else str(error)
        code = error.get("code") if isinstance(error, dict) else None
        missing = no_block_state(message)
        if missing is not None:
            return "soft", missing
        low = message.lower()
        limit = node_limit(code, message)
        if limit is not None:
            return "hard", limit
        if code == -32603 or low.startswith("internal error"):
            return "hard", "upstream-internal"
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


def _scannable(call: Call) -> bool:
    """Whose result ``judge_answer`` reads only for ``null``: a string result
    may stay raw. (Block hashes by height and blocks or headers by hash are
    looked into, and small.)"""
    return call.facts.heights is None and call.method not in _HASH_PINNED_NULLABLE


NO_STATE = frozenset({"state-discarded", "unknown-block"})


def no_state(call: Call, answer: dict[str, Any], tip: int | None) -> str | None:
    """The verdict's reason when ``answer`` is a node saying it has no state
    (or no block) for what ``call`` asked; else None."""
    if "error" not in answer:
        return None
    reason = judge_answer(call, answer, tip)[1]
    return reason if reason in NO_STATE else None


# What a node answers for a block it does not have (reorged away, not imported
# yet, pruned, or another fork's): for a read the proxy pinned, a miss of the pin.
PIN_MISSES = frozenset({"unknown-block", "state-discarded", "null-pinned", "wrong-block"})


def missed_pin(
    calls: Sequence[Call], answers: Sequence[Any], pinned: Iterable[int], tip: int | None
) -> bool:
    """Whether a call the proxy pinned (``pinned``: their positions) was
    answered as a miss of its block. A batch item at a hash the client sent
    itself that a node does not know is not one: it fails over as sent."""
    return any(judge_answer(calls[k], answers[k], tip)[1] in PIN_MISSES for k in pinned)


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
    if not is_batch and len(body) >= RAW_MIN_BYTES and _scannable(calls[0]):
        # a large single answer: its string result kept as the node's bytes,
        # not parsed (addon/rpc/splice.py); anything unusual is parsed below
        raw = scan_answer(body)
        if raw is not None:
            verdict, reason = judge_answer(calls[0], raw, tip)
            return Assessment(verdict, reason, (raw,), reason == "state-discarded")
    try:
        doc = loads(body)
    except (ValueError, RecursionError):
        return Assessment("hard", "invalid-body" if status < 300 else f"http-{status}")
    answers = _match(doc, len(calls), is_batch)
    if answers is None:
        return Assessment("hard", "invalid-body" if status < 300 else f"http-{status}")
    soft_reason = limit = ""
    prefer_archive = False
    for call, answer in zip(calls, answers, strict=True):
        verdict, reason = judge_answer(call, answer, tip)
        if verdict == "hard":
            if reason not in CAPACITY:
                # a batch's answers kept: an upstream batch judges its items apart
                return Assessment("hard", reason, answers if is_batch else None)
            limit = limit or reason
        elif verdict == "soft":
            soft_reason = soft_reason or reason
            prefer_archive = prefer_archive or reason == "state-discarded"
    if limit:
        # the node's limits: another node is tried; the answers are kept for a
        # batch whose every node refused some items (the others are answered)
        return Assessment("hard", limit, answers)
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
