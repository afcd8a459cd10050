"""``proxy.usage.memory_max_batches``: the bound of the usage batches kept in
memory while the spool cannot be written (a full disk)."""

from __future__ import annotations

from typing import Any

import pytest

from common.config import parse_config
from tests.common.helpers import assert_one_line_error


def test_default_and_explicit_value() -> None:
    assert parse_config({}, {}).proxy.usage.memory_max_batches == 1000
    raw = {"proxy": {"usage": {"memory_max_batches": 50, "spool_max_batches": 7}}}
    usage = parse_config(raw, {}).proxy.usage
    assert (usage.memory_max_batches, usage.spool_max_batches) == (50, 7)


@pytest.mark.parametrize("value", [0, -1, "100", True, 1.5])
def test_a_bad_value_is_one_line_naming_the_key(value: Any) -> None:
    raw = {"proxy": {"usage": {"memory_max_batches": value}}}
    assert_one_line_error(raw, "proxy.usage.memory_max_batches")
