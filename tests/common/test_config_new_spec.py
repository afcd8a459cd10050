"""``proxy.new_spec``: defaults, values, and errors naming the key."""

from __future__ import annotations

import pytest

from common.config import ConfigError, parse_config
from common.config.new_spec import NewSpecConfig


def _new_spec(raw: object) -> NewSpecConfig:
    doc = {"proxy": {"new_spec": raw}, "registry": {"endpoints": []}}
    return parse_config(doc, env={}).proxy.new_spec


def test_defaults_and_values() -> None:
    assert _new_spec(None) == NewSpecConfig(True, True, True, 4, 512, 16, 64)
    got = _new_spec({"archive": False, "follows_per_socket": 2, "storage_page_items": 8})
    assert (got.archive, got.chain_spec, got.follows_per_socket, got.storage_page_items) == (
        False,
        True,
        2,
        8,
    )


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"archive": "yes"}, "proxy.new_spec.archive"),
        ({"follows_per_socket": 1}, "proxy.new_spec.follows_per_socket"),
        ({"operations": 0}, "proxy.new_spec.operations"),
        ({"pinned_blocks": 1.5}, "proxy.new_spec.pinned_blocks"),
        ({"pinned_blocks": 15}, "proxy.new_spec.pinned_blocks"),  # a follow starts with 5
        ({"storage_page_items": 0}, "proxy.new_spec.storage_page_items"),
        ({"transaction": True}, "proxy.new_spec.transaction"),
        ([1], "proxy.new_spec"),
    ],
)
def test_errors_name_the_key(raw: object, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        _new_spec(raw)
    assert key in str(e.value)
