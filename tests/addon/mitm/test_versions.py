"""An untested mitmproxy or wsproto: chainproxy refuses to start, or, accepted
by the operator, names what is off (addon/mitm/versions.py)."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import exceptions
from mitmproxy.test import taddons

from addon.addons import build_addons
from addon.hooks.holder import RuntimeHolder
from addon.hooks.shipping import ShipperAddon
from addon.mitm import internals as mitm_internals
from addon.mitm import versions

REPO = Path(__file__).resolve().parents[3]
GOOD = {"mitmproxy": "12.2.3", "wsproto": "1.3.2"}
SECURITY = (
    "431 header bound",
    "408 slow-request deadline",
    "413 JSON body bound",
    "WebSocket message bound",
    "leaked-socket fix",
    "idle closing",
)
FAST = (
    "fast dispatch",
    "direct responses",
    "WebSocket back-pressure",
    "WebSocket direct frames",
    "WebSocket direct reads",
    "HTTP direct reads",
)


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(versions, "_accepted", False)  # as at a process's start


def test_the_installed_versions_are_the_tested_and_pinned_ones() -> None:
    # TESTED and pyproject.toml's pins move together: a new mitmproxy or wsproto
    # means re-running tests/addon/mitm, the benchmarks and the e2e before adding it.
    assert versions.INSTALLED == GOOD
    assert versions.KNOWN and mitm_internals.KNOWN and mitm_internals.check_version()
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for pkg, tested in versions.TESTED.items():
        (pin,) = [d for d in deps if d.startswith(f"{pkg}==")]
        assert pin.removeprefix(f"{pkg}==") in tested


def test_tested_versions_start_with_everything_on() -> None:
    verdict = versions.decide(GOOD)
    assert verdict == versions.Verdict(untested=(), off=(), refused=False)
    assert verdict.line() == ""
    assert versions.mechanisms_off() == {}


def test_the_security_bounds_come_first() -> None:
    names = [m.name for m in versions.MECHANISMS]
    assert names == [*SECURITY, *FAST]
    assert [m.security for m in versions.MECHANISMS] == [True] * 6 + [False] * 6
    assert len({m.key for m in versions.MECHANISMS}) == len(versions.MECHANISMS)


@pytest.mark.parametrize(
    ("installed", "named"),
    [
        ({**GOOD, "mitmproxy": "12.9.1"}, ["mitmproxy 12.9.1 (tested: 12.2.3)"]),
        ({**GOOD, "wsproto": "1.4.0"}, ["wsproto 1.4.0 (tested: 1.3.2)"]),
        (
            {"mitmproxy": "13.0.0", "wsproto": "2.0.0"},
            ["mitmproxy 13.0.0 (tested: 12.2.3)", "wsproto 2.0.0 (tested: 1.3.2)"],
        ),
        ({"mitmproxy": "12.2.3"}, ["wsproto unknown (tested: 1.3.2)"]),
    ],
)
def test_an_untested_version_is_refused_with_one_line_naming_everything_off(
    installed: dict[str, str], named: list[str]
) -> None:
    verdict = versions.decide(installed)
    assert verdict.refused and verdict.untested == tuple(named)
    assert verdict.off == versions.MECHANISMS  # all or nothing
    line = verdict.line()
    assert "\n" not in line and line.startswith("chainproxy refuses to start: untested ")
    assert all(n in line for n in named)
    where = [line.index(name) for name in (*SECURITY, *FAST)]
    assert where == sorted(where)  # every mechanism, the bounds first
    assert line.endswith("--set chainproxy_allow_untested=true")


def test_the_operator_may_accept_an_untested_version() -> None:
    verdict = versions.decide({**GOOD, "mitmproxy": "12.9.1"}, allow=True)
    assert not verdict.refused and verdict.off == versions.MECHANISMS
    line = verdict.line()
    assert "\n" not in line and "accepted by chainproxy_allow_untested" in line
    assert all(name in line for name in (*SECURITY, *FAST))


def test_the_guard_exits_on_an_untested_version(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), pytest.raises(SystemExit) as stop:
        versions.guard(False, {**GOOD, "wsproto": "1.4.0"})
    assert stop.value.code == versions.REFUSED_EXIT != 0
    (record,) = caplog.records
    assert record.levelno == logging.ERROR and "wsproto 1.4.0" in record.getMessage()


def test_accepted_it_warns_once_and_refuses_the_option_turned_off_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    untested = {**GOOD, "mitmproxy": "12.9.1"}
    with caplog.at_level(logging.WARNING):
        assert not versions.guard(True, untested).refused
        versions.guard(True, untested)  # a script reload: said once per process
        with pytest.raises(exceptions.OptionsError, match="read at start"):
            versions.guard(False, untested)  # running already: no exit, the change refused
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "12.9.1" in record.getMessage()
    assert versions.guard(False, GOOD).off == ()  # tested versions: the option is moot


def _untested(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(versions, "INSTALLED", {**GOOD, "mitmproxy": "12.9.1"})


def test_settings_refuses_before_reading_any_config(monkeypatch: pytest.MonkeyPatch) -> None:
    _untested(monkeypatch)
    addons = build_addons()
    settings: Any = addons[0]
    with taddons.context(*addons) as tctx, pytest.raises(SystemExit):
        # what mitmproxy does once it has loaded the script: every option at once
        settings.configure(set(tctx.options.keys()))
    assert settings.holder.runtime is None  # nothing built, not even the missing config's error


def test_settings_accepted_starts_and_reports_the_mechanisms_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _untested(monkeypatch)
    addons = build_addons()
    with taddons.context(*addons) as tctx, caplog.at_level(logging.WARNING):
        tctx.options.update(chainproxy_allow_untested=True)  # Settings' configure: the guard
    assert [r.getMessage() for r in caplog.records] == [
        versions.decide(versions.INSTALLED, allow=True).line()
    ]
    off = versions.mechanisms_off()
    assert list(off) == [m.key for m in versions.MECHANISMS] and set(off.values()) == {1}
    gauges = ShipperAddon(RuntimeHolder())._gauges()  # what each usage batch carries
    assert gauges == {"mechanisms_off": off}


def test_tested_versions_report_no_mechanism_off() -> None:
    assert "mechanisms_off" not in ShipperAddon(RuntimeHolder())._gauges()
