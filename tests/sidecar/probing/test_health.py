"""Per-endpoint health with flap damping:
Unknown -> OK on the first answer, OK -> Degraded after ``fail_threshold``
consecutive failures, Degraded -> OK after ``recover_threshold`` consecutive
successes."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.probing.health import Health, apply
from sidecar.probing.results import DEAD, LIVE, RATE_LIMITED, TIMEOUT, ProbeResult
from tests.examples import examples

EID = "endpoint-srf-0123456789abcdef"


def ok(at: float = 1000.0, latency: int | None = 50, **kw: object) -> ProbeResult:
    return ProbeResult(EID, at, "full", LIVE, latency, **kw)  # type: ignore[arg-type]


def fail(at: float = 1000.0, why: str = DEAD) -> ProbeResult:
    return ProbeResult(EID, at, "full", why)


def walk(
    results: Iterable[ProbeResult],
    h: Health | None = None,
    *,
    fail_threshold: int = 2,
    recover_threshold: int = 2,
) -> tuple[Health, list[str | None]]:
    h = h or Health()
    transitions = []
    for r in results:
        h, t = apply(h, r, fail_threshold=fail_threshold, recover_threshold=recover_threshold)
        transitions.append(t)
    return h, transitions


def test_a_new_endpoint_is_unknown_and_not_probed() -> None:
    h = Health()
    assert h.status == "Unknown"
    assert h.probed is False
    assert h.healthy is False
    assert h.score == 1.0


def test_first_success_makes_it_ok_without_a_transition() -> None:
    h, t = apply(Health(), ok(at=1234.0), fail_threshold=2, recover_threshold=2)
    assert h.status == "OK" and h.healthy
    assert t is None  # no incident opens or closes for a new endpoint
    assert h.probed is True
    assert h.last_probe_at == 1234.0 and h.last_ok_at == 1234.0
    assert h.classification == LIVE


def test_ok_stays_ok_below_the_fail_threshold() -> None:
    h, ts = walk([ok(), fail(), fail()], fail_threshold=3)
    assert h.status == "OK"
    assert ts == [None, None, None]
    assert h.consecutive_failures == 2
    assert h.classification == DEAD  # the last probe's verdict is shown even while OK


def test_degraded_at_the_fail_threshold_with_the_failure_as_message() -> None:
    h, ts = walk([ok(), fail(why=TIMEOUT), fail(why=TIMEOUT), fail(why=TIMEOUT)], fail_threshold=3)
    assert ts == [None, None, None, "degraded"]
    assert h.status == "Degraded" and not h.healthy
    assert h.message == TIMEOUT


def test_degraded_transition_fires_once_and_keeps_the_first_message() -> None:
    h, ts = walk([ok(), fail(why=TIMEOUT), fail(why=TIMEOUT), fail(why=RATE_LIMITED)])
    assert ts == [None, None, "degraded", None]
    assert h.status == "Degraded"
    assert h.message == TIMEOUT  # what made it Degraded
    assert h.classification == RATE_LIMITED  # the latest probe


def test_unknown_endpoint_that_never_answers_becomes_degraded() -> None:
    h, ts = walk([fail(), fail()])
    assert ts == [None, "degraded"]
    assert h.status == "Degraded" and h.probed


def test_one_failure_of_a_new_endpoint_is_probed_but_not_healthy() -> None:
    h, ts = walk([fail()])
    assert ts == [None]
    assert h.status == "Unknown" and h.probed and not h.healthy


def test_degraded_recovers_only_after_recover_threshold_successes() -> None:
    h, _ = walk([ok(), fail(), fail()])
    assert h.status == "Degraded"
    h, ts = walk([ok(), ok()], h, recover_threshold=3)
    assert ts == [None, None] and h.status == "Degraded"
    h, ts = walk([ok()], h, recover_threshold=3)
    assert ts == ["recovered"]
    assert h.status == "OK" and h.healthy
    assert h.message == ""  # the incident message is cleared on recovery


def test_a_failure_between_successes_resets_the_recovery_count() -> None:
    h, _ = walk([ok(), fail(), fail()])
    h, ts = walk([ok(), fail(), ok()], h)
    assert h.status == "Degraded" and ts == [None, None, None]
    h, ts = walk([ok()], h)
    assert ts == ["recovered"] and h.status == "OK"


def test_flapping_endpoint_never_leaves_degraded() -> None:
    h, _ = walk([ok(), fail(), fail()])
    h, ts = walk([ok(), fail()] * 25, h, fail_threshold=2, recover_threshold=2)
    assert h.status == "Degraded"
    assert set(ts) == {None}  # no incident closes and reopens on every flap


def test_flapping_healthy_endpoint_never_becomes_degraded() -> None:
    h, ts = walk([ok(), fail()] * 25, fail_threshold=2, recover_threshold=2)
    assert h.status == "OK"
    assert set(ts) == {None}


def test_latency_is_an_ewma_of_successful_probes_only() -> None:
    h, _ = walk([ok(latency=100)])
    assert h.latency_ms == pytest.approx(100.0)
    h, _ = walk([ok(latency=200)], h)
    first = h.latency_ms
    assert first is not None and 100.0 < first < 200.0  # moves toward the new sample
    h, _ = walk([fail(), fail(), fail()], h)
    assert h.latency_ms == pytest.approx(first)  # failures do not touch it
    h, _ = walk([ok(latency=None)], h)
    assert h.latency_ms == pytest.approx(first)  # an answer without a timing does not either


def test_latency_converges_to_a_steady_value() -> None:
    h, _ = walk([ok(latency=1000)] + [ok(latency=20)] * 40)
    assert h.latency_ms == pytest.approx(20.0, abs=0.5)


def test_heights_and_archive_are_kept_from_the_last_result_that_had_them() -> None:
    h, _ = walk([ok(best=100, finalized=98, archive=True, at=1.0)])
    assert (h.best, h.finalized, h.archive, h.best_at) == (100, 98, True, 1.0)
    # A head probe answers heights but no archive check; a failure answers nothing.
    h, _ = walk([ok(best=105, finalized=103, at=2.0), fail(at=3.0)], h)
    assert (h.best, h.finalized, h.archive, h.best_at) == (105, 103, True, 2.0)
    # A full probe without heights keeps the heights; a conclusive archive=False wins.
    h, _ = walk([ok(archive=False, at=4.0)], h)
    assert (h.best, h.finalized, h.archive, h.best_at) == (105, 103, False, 2.0)
    assert h.last_probe_at == 4.0


def test_score_is_the_share_of_the_last_20_outcomes() -> None:
    h, _ = walk([ok(), ok(), ok(), fail()], fail_threshold=10)
    assert h.score == pytest.approx(0.75)
    # 30 failures, then 20 successes: only the last 20 count.
    h, _ = walk([fail()] * 30 + [ok()] * 20, recover_threshold=1)
    assert h.score == pytest.approx(1.0)
    assert len(h.recent) == 20
    h, _ = walk([fail()] * 5, h, fail_threshold=100)
    assert h.score == pytest.approx(15 / 20)


def test_last_ok_at_is_not_moved_by_failures() -> None:
    h, _ = walk([ok(at=10.0), fail(at=20.0)])
    assert h.last_ok_at == 10.0 and h.last_probe_at == 20.0


# --- property: status follows a tiny reference walk --------------------------------------


def reference(
    outcomes: list[bool], fail_threshold: int, recover_threshold: int
) -> list[tuple[str, str | None]]:
    status, fails, succ = "Unknown", 0, 0
    out: list[tuple[str, str | None]] = []
    for good in outcomes:
        transition = None
        if good:
            fails, succ = 0, succ + 1
            if status == "Unknown":
                status = "OK"
            elif status == "Degraded" and succ >= recover_threshold:
                status, transition = "OK", "recovered"
        else:
            fails, succ = fails + 1, 0
            if status != "Degraded" and fails >= fail_threshold:
                status, transition = "Degraded", "degraded"
        out.append((status, transition))
    return out


@settings(max_examples=examples(300), deadline=None)
@given(
    outcomes=st.lists(st.booleans(), max_size=60),
    fail_threshold=st.integers(1, 5),
    recover_threshold=st.integers(1, 5),
)
def test_status_matches_the_reference_walk(
    outcomes: list[bool], fail_threshold: int, recover_threshold: int
) -> None:
    expected = reference(outcomes, fail_threshold, recover_threshold)
    h = Health()
    for i, (good, (status, transition)) in enumerate(zip(outcomes, expected, strict=True)):
        r = ok(at=float(i)) if good else fail(at=float(i))
        h, t = apply(h, r, fail_threshold=fail_threshold, recover_threshold=recover_threshold)
        assert (h.status == "Degraded") == (status == "Degraded"), (i, outcomes[: i + 1])
        assert h.status == status
        assert t == transition
    window = outcomes[-20:]
    assert h.score == pytest.approx(sum(window) / len(window) if window else 1.0)
    assert h.probed == bool(outcomes)
