"""What is served where: the new spec's families switched by their keys,
chainHead and archive_v1_storage / _storageDiff only on a WebSocket, writes never, and
``rpc_methods`` listing that by whole groups (the spec: a group is all or nothing)."""

from __future__ import annotations

import dataclasses

from addon.newspec.served import new_spec_refusal, served_methods
from addon.rpc.new_spec import ARCHIVE, CHAIN_HEAD, CHAIN_SPEC
from common.config import parse_config
from common.config.model import ProxyConfig
from common.config.new_spec import NewSpecConfig


def _proxy(**raw: object) -> ProxyConfig:
    return parse_config({"proxy": raw, "registry": {"endpoints": []}}, env={}).proxy


def test_refusals_say_why() -> None:
    on = NewSpecConfig()
    assert new_spec_refusal("archive_v1_body", on, websocket=False) is None
    assert new_spec_refusal("chainSpec_v1_chainName", on, websocket=False) is None
    assert "WebSocket" in str(new_spec_refusal("chainHead_v1_follow", on, websocket=False))
    assert new_spec_refusal("chainHead_v1_follow", on, websocket=True) is None
    assert "subscription" in str(new_spec_refusal("archive_v1_storage", on, websocket=False))
    assert new_spec_refusal("archive_v1_storage", on, websocket=True) is None
    diff = str(new_spec_refusal("archive_v1_stopStorageDiff", on, websocket=False))
    assert diff.startswith("archive_v1_storageDiff is a subscription")
    assert "archive_v1_storageDiffEvent" in diff
    assert new_spec_refusal("archive_v1_storageDiff", on, websocket=True) is None
    for ws in (False, True):
        assert "writes are not served" in str(
            new_spec_refusal("transactionWatch_v1_submitAndWatch", on, websocket=ws)
        )
    off = NewSpecConfig(archive=False, chain_spec=False, chain_head=False)
    for method, key in [
        ("archive_v1_body", "archive"),
        ("chainSpec_v1_properties", "chain_spec"),
        ("chainHead_v1_follow", "chain_head"),
    ]:
        assert f"proxy.new_spec.{key}" in str(new_spec_refusal(method, off, websocket=True))


def test_rpc_methods_lists_what_each_transport_serves() -> None:
    proxy = _proxy()
    http = set(served_methods(proxy, websocket=False, node_wss=True))
    ws = set(served_methods(proxy, websocket=True, node_wss=True))
    ws_no_nodes = set(served_methods(proxy, websocket=True, node_wss=False))
    assert "rpc_methods" in http and "chain_getHeader" in http and "state_call" in http
    # a group is all or nothing (the spec): archive_v1 is listed whole over
    # HTTP, as a node lists it, though its subscriptions need a WebSocket
    assert set(CHAIN_SPEC) <= http and set(ARCHIVE) <= http
    assert "WebSocket" in str(
        new_spec_refusal("archive_v1_storage", proxy.new_spec, websocket=False)
    )
    assert not set(CHAIN_HEAD) & http and "chain_subscribeNewHeads" not in http
    assert set(ARCHIVE) | set(CHAIN_HEAD) | {"chain_subscribeNewHeads"} <= ws
    assert not set(CHAIN_HEAD) & ws_no_nodes and "chain_subscribeNewHeads" not in ws_no_nodes
    assert set(ARCHIVE) <= ws_no_nodes  # made of HTTP legacy calls: no node-wss needed
    for listing in (http, ws, ws_no_nodes):
        assert not [m for m in listing if m.lower().startswith(("author_", "transaction"))]


def test_the_allowlist_governs_the_legacy_methods_and_the_keys_the_families() -> None:
    proxy = _proxy(
        allowlist=["chain_getHeader", "author_submitExtrinsic", "archive_v1_body"],
        new_spec={"archive": False, "chain_head": False},
    )
    ws = served_methods(proxy, websocket=True, node_wss=True)
    assert "chain_getHeader" in ws and "author_submitExtrinsic" not in ws
    assert not [m for m in ws if m.startswith(("archive_", "chainHead_"))]
    assert [m for m in ws if m.startswith("chainSpec_")] == sorted(CHAIN_SPEC)
    quiet = dataclasses.replace(proxy.websocket, subscriptions=False)
    ws = served_methods(dataclasses.replace(proxy, websocket=quiet), websocket=True, node_wss=True)
    assert "chain_subscribeNewHeads" not in ws and "chain_unsubscribeNewHeads" not in ws
