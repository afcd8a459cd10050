"""JSON-RPC 2.0 request parsing and error bodies (pure).

A request body is a single call object or a batch (array). Items of a batch
that are not valid calls become per-item errors, so one bad item does not
spoil the others; only a body that is not JSON at all, an empty batch, or a
batch over the size limit is refused whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from addon.rpc.blocks import BlockFacts, block_facts
from common.jsontext import dumps as dumps  # re-exported: the pipeline's JSON
from common.jsontext import loads

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
LIMIT_EXCEEDED = -32005
POLICY_REFUSED = -32004

_MAX_METHOD_LEN = 256


@dataclass(frozen=True, slots=True)
class Call:
    """One valid call: ``id`` is echoed back exactly as the client sent it.
    ``facts`` (heights asked, block-hash params) are read from the params once,
    here, for every stage that needs them."""

    id: Any
    method: str
    params: list[Any] | dict[str, Any]
    facts: BlockFacts = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "facts", block_facts(self.method, self.params))


@dataclass(frozen=True, slots=True)
class BadItem:
    """A batch item (or single body) that is not a valid JSON-RPC 2.0 call."""

    id: Any
    code: int
    message: str


Item = Call | BadItem


@dataclass(frozen=True, slots=True)
class Parsed:
    items: tuple[Item, ...]
    is_batch: bool

    @property
    def calls(self) -> tuple[Call, ...]:
        return tuple(i for i in self.items if isinstance(i, Call))


@dataclass(frozen=True, slots=True)
class Refusal:
    """The whole request is refused: HTTP status plus one JSON-RPC error."""

    status: int
    code: int
    message: str
    id: Any = None
    data: Any = None
    headers: tuple[tuple[str, str], ...] = ()


def _valid_id(value: Any) -> bool:
    # Numbers (not bools), strings and null; objects/arrays are not ids.
    return (
        value is None
        or isinstance(value, str)
        or (isinstance(value, int | float) and not isinstance(value, bool))
    )


def parse_item(obj: Any) -> Item:
    if not isinstance(obj, dict):
        return BadItem(None, INVALID_REQUEST, "invalid request: a call must be a JSON object")
    raw_id = obj.get("id")
    echo_id = raw_id if _valid_id(raw_id) else None
    if obj.get("jsonrpc") != "2.0":
        return BadItem(echo_id, INVALID_REQUEST, 'invalid request: "jsonrpc" must be "2.0"')
    if "id" not in obj:
        return BadItem(
            None,
            INVALID_REQUEST,
            "invalid request: notifications (calls without id) are not supported",
        )
    if not _valid_id(raw_id):
        return BadItem(
            None, INVALID_REQUEST, "invalid request: id must be a number, string or null"
        )
    method = obj.get("method")
    if not isinstance(method, str) or not method or len(method) > _MAX_METHOD_LEN:
        return BadItem(
            echo_id, INVALID_REQUEST, 'invalid request: "method" must be a non-empty string'
        )
    params = obj.get("params", [])
    if params is None:
        params = []
    if not isinstance(params, list | dict):
        return BadItem(
            echo_id, INVALID_REQUEST, 'invalid request: "params" must be an array or object'
        )
    return Call(raw_id, method, params)


def parse_body(body: bytes, *, max_batch: int) -> Parsed | Refusal:
    try:
        doc = loads(body)
    except (ValueError, RecursionError):
        # ValueError covers bad JSON and non-UTF-8 bytes; RecursionError absurd nesting.
        return Refusal(400, PARSE_ERROR, "parse error: body is not valid JSON")
    if isinstance(doc, list):
        if not doc:
            return Refusal(400, INVALID_REQUEST, "invalid request: empty batch")
        if len(doc) > max_batch:
            return Refusal(
                413,
                INVALID_REQUEST,
                f"batch too large: {len(doc)} calls, the limit is {max_batch}",
                data={"limit": max_batch},
            )
        return Parsed(tuple(parse_item(o) for o in doc), is_batch=True)
    item = parse_item(doc)
    if isinstance(item, BadItem):
        return Refusal(400, item.code, item.message, id=item.id)
    return Parsed((item,), is_batch=False)


def error_obj(id_: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": err}


def outbound_body(calls: Sequence[Call], is_batch: bool) -> bytes:
    """The request sent upstream: the caller's calls renumbered 0..n-1, so answers
    are matched to calls even when the caller reused or nulled ids."""
    objs = [
        {"jsonrpc": "2.0", "id": i, "method": c.method, "params": c.params}
        for i, c in enumerate(calls)
    ]
    return dumps(objs if is_batch else objs[0])
