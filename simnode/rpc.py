"""JSON-RPC 2.0 envelope handling and the Substrate method table (pure, no I/O).

The server parses a body with :func:`parse`, counts/inspects the calls, applies
transport-level faults, then turns the parsed calls into a body with
:meth:`Dispatcher.respond`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .chain import (
    Chain,
    _sha,
    extrinsic_hash,
    is_hash,
    storage_value,
)
from .runtime import call_result, metadata, runtime_version

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# Substrate reports client/database errors (unknown block, pruned state) as 4003.
CLIENT_ERROR = 4003

_HEX_RE = re.compile(r"0x(?:[0-9a-fA-F]{2})*")
_DUMPS = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class Call:
    id: Any
    method: str
    params: Any
    # JSON-RPC notifications (no "id" member) get no response.
    notification: bool = False


@dataclass(frozen=True, slots=True)
class Invalid:
    id: Any
    code: int
    message: str


@dataclass(frozen=True, slots=True)
class Parsed:
    entries: tuple[Call | Invalid, ...]
    batch: bool

    @property
    def calls(self) -> list[Call]:
        return [e for e in self.entries if isinstance(e, Call)]


def _entry(obj: Any) -> Call | Invalid:
    if not isinstance(obj, dict):
        return Invalid(None, INVALID_REQUEST, "Invalid request")
    has_id = "id" in obj
    rid = obj.get("id")
    if rid is not None and (isinstance(rid, bool) or not isinstance(rid, int | float | str)):
        return Invalid(None, INVALID_REQUEST, "Invalid request")
    method = obj.get("method")
    params = obj.get("params")
    if (
        obj.get("jsonrpc") != "2.0"
        or not isinstance(method, str)
        or not (params is None or isinstance(params, list | dict))
    ):
        return Invalid(rid, INVALID_REQUEST, "Invalid request")
    return Call(rid, method, params, not has_id)


def parse(body: bytes | str) -> Parsed:
    try:
        doc = json.loads(body)
    except ValueError:
        return Parsed((Invalid(None, PARSE_ERROR, "Parse error"),), False)
    if isinstance(doc, list):
        if not doc:
            return Parsed((Invalid(None, INVALID_REQUEST, "Invalid request"),), False)
        return Parsed(tuple(_entry(o) for o in doc), True)
    return Parsed((_entry(doc),), False)


# ---- parameter helpers ------------------------------------------------------------


def _bad_params(detail: str = "") -> RpcError:
    return RpcError(INVALID_PARAMS, f"Invalid params{': ' + detail if detail else ''}")


def _args(params: Any, names: Sequence[str], required: int = 0) -> list[Any]:
    """Positional or named params -> list of len(names), missing ones None."""
    if params is None:
        values: list[Any] = []
    elif isinstance(params, list):
        if len(params) > len(names):
            raise _bad_params(f"expected at most {len(names)} params, got {len(params)}")
        values = list(params)
    else:
        unknown = set(params) - set(names)
        if unknown:
            raise _bad_params(f"unknown params {sorted(unknown)}")
        values = [params.get(n) for n in names]
    values.extend([None] * (len(names) - len(values)))
    for i in range(required):
        if values[i] is None:
            raise _bad_params(f"missing {names[i]}")
    return values


def _opt_hash(value: Any) -> str | None:
    if value is None:
        return None
    if not is_hash(value):
        raise _bad_params("expected a 0x-prefixed 32-byte hex block hash")
    return str(value).lower()


def _hex(value: Any, what: str) -> str:
    if not isinstance(value, str) or _HEX_RE.fullmatch(value) is None:
        raise _bad_params(f"{what} must be 0x-prefixed hex bytes")
    return value


def _block_number(value: Any) -> int | None:
    """NumberOrHex -> int; None means 'best'."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise _bad_params("block number must be a number or hex string")
    if isinstance(value, int):
        if value < 0:
            raise _bad_params("block number must be >= 0")
        return value
    if isinstance(value, str) and value[:2] in ("0x", "0X") and len(value) > 2:
        try:
            return int(value[2:], 16)
        except ValueError:
            pass
    raise _bad_params("block number must be a number or 0x-prefixed hex string")


# ---- dispatcher ---------------------------------------------------------------------

Handler = Callable[[Any], Any]


class Dispatcher:
    """Maps method names to handlers over a :class:`Chain`."""

    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        c = chain.config
        self._health = {"peers": 8, "isSyncing": False, "shouldHavePeers": True}
        self._properties = {"ss58Format": 42, "tokenDecimals": 9, "tokenSymbol": "TAO"}
        consts: dict[str, Any] = {
            "system_chain": c.chain_name,
            "system_name": "Subtensor Node",
            "system_version": "4.0.0-dev-sim",
            "system_chainType": "Live",
            "system_properties": self._properties,
            "system_health": self._health,
        }
        table: dict[str, Handler] = {
            "chain_getHeader": self._get_header,
            "chain_getBlock": self._get_block,
            "chain_getBlockHash": self._get_block_hash,
            "chain_getHead": self._get_block_hash,  # substrate alias
            "chain_getFinalizedHead": self._finalized_head,
            "chain_getFinalisedHead": self._finalized_head,
            "system_syncState": self._sync_state,
            "state_getRuntimeVersion": self._runtime_version,
            "chain_getRuntimeVersion": self._runtime_version,  # substrate alias
            "state_getMetadata": self._metadata,
            "state_getStorage": self._storage,
            "state_getStorageAt": self._storage,
            "state_call": self._call,
            "state_callAt": self._call,
            "state_getKeysPaged": self._keys_paged,
            "state_getKeysPagedAt": self._keys_paged,
            "state_queryStorageAt": self._query_storage_at,
            "childstate_getStorageEntries": self._child_entries,
            "childstate_getKeysPaged": self._child_keys_paged,
            "author_submitExtrinsic": self._submit,
            "rpc_methods": self._rpc_methods,
        }
        for name, value in consts.items():
            table[name] = self._const(name, value)
        self._table = table
        self.methods: tuple[str, ...] = tuple(sorted(table))
        self._methods_result = {"methods": list(self.methods)}
        self.submitted = 0
        self._refused: frozenset[str] = frozenset()  # the ``refuse_methods`` fault
        self._refusal: dict[str, Any] = {}

    def refuse(self, methods: Iterable[str], code: int, message: str) -> None:
        """Calls of ``methods`` are answered with this error from now on (none: off)."""
        self._refused = frozenset(methods)
        self._refusal = {"code": code, "message": message}

    @staticmethod
    def _const(name: str, value: Any) -> Handler:
        def handler(params: Any) -> Any:
            _args(params, ())
            return value

        handler.__name__ = name
        return handler

    # ---- envelope -------------------------------------------------------------

    def call(self, method: str, params: Any) -> Any:
        handler = self._table.get(method)
        if handler is None:
            raise RpcError(METHOD_NOT_FOUND, "Method not found")
        return handler(params)

    def answer(self, entry: Call | Invalid, fail: bool = False) -> dict[str, Any]:
        if isinstance(entry, Invalid):
            return {
                "jsonrpc": "2.0",
                "id": entry.id,
                "error": {"code": entry.code, "message": entry.message},
            }
        if fail:
            return {
                "jsonrpc": "2.0",
                "id": entry.id,
                "error": {"code": INTERNAL_ERROR, "message": "Internal error"},
            }
        if self._refused and entry.method in self._refused:
            return {"jsonrpc": "2.0", "id": entry.id, "error": dict(self._refusal)}
        try:
            result = self.call(entry.method, entry.params)
        except RpcError as exc:
            return {"jsonrpc": "2.0", "id": entry.id, "error": exc.to_json()}
        except Exception:  # a bug here must look like a node error, not a dead socket
            return {
                "jsonrpc": "2.0",
                "id": entry.id,
                "error": {"code": INTERNAL_ERROR, "message": "Internal error"},
            }
        return {"jsonrpc": "2.0", "id": entry.id, "result": result}

    def respond(self, parsed: Parsed, fail: Callable[[], bool] | None = None) -> bytes:
        """Body answering parsed; b"" when everything was a notification.

        ``fail`` is asked once per call; True turns that call into -32603.
        """
        out = []
        for e in parsed.entries:
            failed = fail is not None and isinstance(e, Call) and fail()
            ans = self.answer(e, failed)
            if not (isinstance(e, Call) and e.notification):
                out.append(ans)
        if parsed.batch:
            return _DUMPS(out).encode() if out else b""
        return _DUMPS(out[0]).encode() if out else b""

    # ---- helpers --------------------------------------------------------------

    def _state_block(self, block_hash: str | None) -> int:
        """Block number for a state query, enforcing existence and pruning."""
        chain = self.chain
        if block_hash is None:
            return chain.best()
        n = chain.number_of(block_hash)
        if n is None:
            raise RpcError(
                CLIENT_ERROR,
                f"Client error: UnknownBlock: Header was not found in the database: {block_hash}",
            )
        if not chain.state_available(n):
            raise RpcError(CLIENT_ERROR, f"Client error: State already discarded for {block_hash}")
        return n

    def _block_for(self, params: Any) -> int | None:
        (h,) = _args(params, ("hash",))
        block_hash = _opt_hash(h)
        if block_hash is None:
            return self.chain.best()
        return self.chain.number_of(block_hash)

    # ---- methods --------------------------------------------------------------

    def _get_header(self, params: Any) -> Any:
        n = self._block_for(params)
        return None if n is None else self.chain.header(n)

    def _get_block(self, params: Any) -> Any:
        n = self._block_for(params)
        return None if n is None else self.chain.block(n)

    def _one_block_hash(self, value: Any) -> str | None:
        n = _block_number(value)
        chain = self.chain
        return chain.block_hash(chain.best()) if n is None else chain.hash_at(n)

    def _get_block_hash(self, params: Any) -> Any:
        (arg,) = _args(params, ("number",))
        if isinstance(arg, list):
            return [self._one_block_hash(v) for v in arg]
        return self._one_block_hash(arg)

    def _finalized_head(self, params: Any) -> Any:
        _args(params, ())
        return self.chain.block_hash(self.chain.finalized())

    def _sync_state(self, params: Any) -> Any:
        _args(params, ())
        best = self.chain.best()
        return {"startingBlock": 0, "currentBlock": best, "highestBlock": best}

    def _runtime_version(self, params: Any) -> Any:
        (h,) = _args(params, ("at",))
        n = self._state_block(_opt_hash(h))
        return runtime_version(self.chain.spec_version(n))

    def _metadata(self, params: Any) -> Any:
        (h,) = _args(params, ("at",))
        n = self._state_block(_opt_hash(h))
        return metadata(self.chain.spec_version(n))

    def _storage(self, params: Any) -> Any:
        key, h = _args(params, ("key", "at"), required=1)
        key = _hex(key, "key")
        self._state_block(_opt_hash(h))
        return storage_value(key, self.chain.wrong_storage)

    def _keys_paged(self, params: Any) -> Any:
        prefix, count, start, h = _args(params, ("prefix", "count", "startKey", "at"), required=2)
        prefix = _hex(prefix, "prefix")
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= 1000:
            raise _bad_params("count must be an integer in [0, 1000]")
        self._state_block(_opt_hash(h))
        # 64 deterministic keys under any prefix, in order, paged after startKey
        keys = sorted(prefix + _sha(f"{prefix}:{i}")[:32] for i in range(64))
        after = _hex(start, "startKey").lower() if start is not None else ""
        return [k for k in keys if k > after][:count]

    def _query_storage_at(self, params: Any) -> Any:
        keys, h = _args(params, ("keys", "at"), required=1)
        if not isinstance(keys, list):
            raise _bad_params("keys must be a list")
        n = self._state_block(_opt_hash(h))
        changes = [[k, storage_value(_hex(k, "key"))] for k in keys]
        return [{"block": self.chain.block_hash(n), "changes": changes}]

    def _child_entries(self, params: Any) -> Any:
        child, keys, h = _args(params, ("childStorageKey", "keys", "at"), required=2)
        if not isinstance(keys, list):
            raise _bad_params("keys must be a list")
        child = _hex(child, "childStorageKey")
        self._state_block(_opt_hash(h))
        # a child trie is modelled as the main trie's values under the child's key
        return [storage_value(child + _hex(k, "key")[2:]) for k in keys]

    def _child_keys_paged(self, params: Any) -> Any:
        if not isinstance(params, list) or not params:
            raise _bad_params("childStorageKey, prefix and count are required")
        _hex(params[0], "childStorageKey")
        return self._keys_paged(params[1:])  # the same 64 keys under any prefix

    def _call(self, params: Any) -> Any:
        method, data, h = _args(params, ("name", "bytes", "at"), required=2)
        if not isinstance(method, str):
            raise _bad_params("name must be a string")
        data = _hex(data, "bytes")
        n = self._state_block(_opt_hash(h))
        return call_result(method, data, self.chain.spec_version(n))

    def _submit(self, params: Any) -> Any:
        (xt,) = _args(params, ("extrinsic",), required=1)
        xt = _hex(xt, "extrinsic")
        self.submitted += 1
        return extrinsic_hash(xt)

    def _rpc_methods(self, params: Any) -> Any:
        _args(params, ())
        return self._methods_result
