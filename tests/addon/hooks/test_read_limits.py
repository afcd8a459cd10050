"""The read limits' addon: mitmproxy's ``load`` patches them in, ``done``
takes them out (the patches themselves: tests/addon/mitm/test_limits.py)."""

from __future__ import annotations

from addon.hooks.read_limits import ReadLimitsAddon
from addon.mitm.limits import ReadLimits


def test_load_installs_the_limits_and_done_removes_them() -> None:
    addon = ReadLimitsAddon(ReadLimits())
    addon.load(None)
    try:
        assert addon.limits.installed
    finally:
        addon.done()
    assert not addon.limits.installed
