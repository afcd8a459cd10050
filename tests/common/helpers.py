"""What the config tests share: endpoint entries, and the check that an error
is one line naming its key."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from common.config import ConfigError, parse_config

REPO = Path(__file__).resolve().parents[2]
ID_RE = re.compile(r"^endpoint-srf-[0-9a-f]{16}$")


def ep(**over: Any) -> dict[str, Any]:
    base = {
        "url": "https://entrypoint-finney.opentensor.ai",
        "provider": "opentensor",
        "kind": "node-rpc",
        "network": "finney",
        "subnet": 0,
    }
    base.update(over)
    return base


def with_endpoints(*endpoints: dict[str, Any]) -> dict[str, Any]:
    return {"registry": {"endpoints": list(endpoints)}}


def assert_one_line_error(raw: Any, key: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, env if env is not None else {})
    message = str(info.value)
    assert "\n" not in message and "\r" not in message, message
    assert key in message, message
    assert info.value.key == key
    return message
