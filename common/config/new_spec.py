"""``proxy.new_spec``: Substrate's new JSON-RPC interface (``chainHead_v1_*``,
``archive_v1_*``, ``chainSpec_v1_*``), each family switched on or off here,
and the bounds of the follows chainproxy serves itself. An operator's
``proxy.allowlist`` governs the legacy methods only; these keys decide the
new-spec families (their writes, ``transaction_v1_*``, are never served)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.config.errors import ConfigError
from common.config.readers import check_keys, get_bool, get_int, mapping


@dataclass(frozen=True, slots=True)
class NewSpecConfig:
    archive: bool = True  # archive_v1_*: stateless reads, made of legacy calls
    chain_spec: bool = True  # chainSpec_v1_*: the chain's name, genesis, properties
    chain_head: bool = True  # chainHead_v1_*: follows, over WebSocket only
    # a socket's chainHead_v1_follow subscriptions at once (the spec asks servers
    # to allow at least 2)
    follows_per_socket: int = 4
    pinned_blocks: int = 512  # blocks a follow may hold pinned before it is stopped
    # operations in progress at once per follow (each chainHead_v1_storage item,
    # body and call counts one; the spec's floor is 16), and archive_v1_storage
    # operations per socket
    operations: int = 16
    storage_page_items: int = 64  # storage items per notification page
    # when a proxy process follows a network (addon/follow/): "on_demand" while
    # follows are open (and a linger after); "always" from the start, for every
    # network with node-wss endpoints, so head pinning and the pre-warm learn
    # each new block even when no client asks for headers
    view: str = "on_demand"


def parse_new_spec(raw: Any) -> NewSpecConfig:
    n = mapping(raw, "proxy.new_spec")
    check_keys(n, tuple(NewSpecConfig.__dataclass_fields__), "proxy.new_spec")
    d = NewSpecConfig()
    key = "proxy.new_spec."
    return NewSpecConfig(
        archive=get_bool(n, "archive", d.archive, key + "archive"),
        chain_spec=get_bool(n, "chain_spec", d.chain_spec, key + "chain_spec"),
        chain_head=get_bool(n, "chain_head", d.chain_head, key + "chain_head"),
        follows_per_socket=get_int(
            n, "follows_per_socket", d.follows_per_socket, key + "follows_per_socket", minimum=2
        ),
        # a follow starts with the last 5 finalized blocks pinned: fewer than
        # 16 would stop every follow at its first blocks
        pinned_blocks=get_int(
            n, "pinned_blocks", d.pinned_blocks, key + "pinned_blocks", minimum=16
        ),
        operations=get_int(n, "operations", d.operations, key + "operations", minimum=1),
        view=_view(n.get("view", d.view)),
        storage_page_items=get_int(
            n, "storage_page_items", d.storage_page_items, key + "storage_page_items", minimum=1
        ),
    )


def _view(raw: Any) -> str:
    if raw not in ("on_demand", "always"):
        raise ConfigError("proxy.new_spec.view", f"must be on_demand or always, not {raw!r}")
    return str(raw)
