"""ui/frame/measured.py: sessions that ask for the same measurement while it is being made share that one
measurement (a class opening a page at once runs its sweep once); when the session measuring stops first, a
waiting one measures instead; "Measure again" never joins, it measures."""
import itertools
import threading
import types

import pytest

from ui.frame import measured

_KEYS = itertools.count()


class _QuietCalibration:
    result = types.SimpleNamespace(disturbed=False, flags=())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


JOINED = threading.Event()  # set when a session starts waiting for another's measurement


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    from ui.frame import work

    monkeypatch.setattr(measured, "calibrated", _QuietCalibration)
    wait = work.wait_for_event
    JOINED.clear()

    def joined_then_wait(event):
        JOINED.set()
        wait(event)

    monkeypatch.setattr(work, "wait_for_event", joined_then_wait)


def _key():
    return ("test_flight", next(_KEYS))


def _in_thread(fn):
    out = {}

    def body():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001  handed to the test
            out["error"] = e

    t = threading.Thread(target=body)
    t.start()
    return t, out


def _wait_until(cond, timeout=10.0):
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if cond():
            return
        done.wait(0.01)
    raise AssertionError("condition not reached")


def _measuring(key, calls, tag, end=lambda: "sweep"):
    """A session measuring ``key`` in a thread, held inside its measurement (``calls`` gets ``tag``) until the
    returned event is set; then its measurement returns ``end()``."""
    release = threading.Event()

    def held():
        calls.append(tag)
        release.wait(10)
        return end()

    thread, out = _in_thread(lambda: measured.measure(key, held))
    _wait_until(lambda: calls)
    return release, thread, out


def _closed_tab():
    raise RuntimeError("the tab was closed")


def test_a_second_asker_joins_the_measurement_being_made():
    key, calls = _key(), []
    release, first, got_first = _measuring(key, calls, 1)
    second, got_second = _in_thread(lambda: measured.measure(key, lambda: calls.append(2) or "again"))
    assert JOINED.wait(10), "the second asker did not wait for the measurement being made"
    release.set()
    first.join(10)
    second.join(10)
    assert calls == [1], "the second asker measured again instead of joining"
    assert got_first["value"].value == got_second["value"].value == "sweep"
    assert got_first["value"].run_id == got_second["value"].run_id  # the one measurement, not a copy of the value
    assert key not in measured._FLIGHTS


def test_when_the_measuring_run_stops_a_waiting_one_measures():
    key, calls = _key(), []
    release, first, got_first = _measuring(key, calls, "stopped", end=_closed_tab)
    second, got_second = _in_thread(lambda: measured.measure(key, lambda: calls.append("whole") or "sweep"))
    assert JOINED.wait(10)
    release.set()
    first.join(10)
    second.join(10)
    assert isinstance(got_first.get("error"), RuntimeError)
    assert calls == ["stopped", "whole"] and got_second["value"].value == "sweep"
    assert key not in measured._FLIGHTS


def test_measure_again_measures_even_while_another_measurement_is_made():
    key, calls = _key(), []
    release, first, _ = _measuring(key, calls, "slow", end=lambda: 1)
    again = measured.measure(key, lambda: calls.append("again") or 2, again=True)
    release.set()
    first.join(10)
    assert again.value == 2 and calls == ["slow", "again"]
