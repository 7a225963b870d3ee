"""Measurements belong to the run that made them: "Measure again" measures again, a quiet result is shared with
other sessions, a disturbed one is not, and the busy warning shows on the page."""
from streamlit.testing.v1 import AppTest

from engine.measure import noise
from engine.timeline import experiment as T
from tests.app.test_pages import errors, run_page


def _script():
    import streamlit as st

    from ui.frame import measured

    m = measured.measure(("test-measured-key",), lambda: 42, again=measured.again_pressed("again"))
    st.markdown(f"run {m.run_id} value {m.value} disturbed {m.calibration.disturbed}")
    measured.measure_again_bar([m.calibration], "again")


def _run_id(at):
    return int(next(m.value for m in at.markdown if m.value.startswith("run ")).split()[1])


def test_quiet_results_are_shared_and_disturbed_ones_are_not(monkeypatch):
    from ui.frame import measured

    measured._SHARED.pop(("test-measured-key",), None)
    monkeypatch.setattr(noise, "judge", lambda *a: ("Other programs used 1.9 CPU cores on average.",))
    a = AppTest.from_function(_script).run()
    assert not errors(a) and "disturbed True" in a.markdown[0].value
    assert any(noise.BUSY_MESSAGE in w.value for w in a.warning)
    b = AppTest.from_function(_script).run()
    assert _run_id(b) != _run_id(a)  # the disturbed result stayed with session a: b measured its own
    monkeypatch.setattr(noise, "judge", lambda *a: ())
    c = AppTest.from_function(_script).run()
    d = AppTest.from_function(_script).run()
    assert _run_id(d) == _run_id(c) and not d.warning  # a quiet result is served to the next session
    a.run()
    assert _run_id(a) != _run_id(c)  # a keeps its own measurement until it measures again
    a.button(key="again").click().run()
    assert _run_id(a) > _run_id(d) and not a.warning  # measured again, now quiet


def test_measure_again_on_the_timeline_page_measures_again(monkeypatch):
    from ui.frame import measured

    # a quiet result of the same run measured by an earlier test (tests/app/test_timeline.py) would be shared here
    for key in [k for k, _ in measured._SHARED.items() if k[0] == "timeline_cache"]:
        measured._SHARED.pop(key, None)
    calls = []
    real = T.cache_comparison

    def counting(*args, **kw):
        calls.append(args[2])
        return real(*args, **kw)

    monkeypatch.setattr(T, "cache_comparison", counting)
    at = run_page("pages/timeline.py", model="tiny-random", max_new_tokens="5")
    at.slider(key="timeline_cmp_tokens").set_value(3)
    next(b for b in at.button if b.label == "Run with and without the cache").click().run()
    assert not errors(at), errors(at)
    n = len(calls)
    assert n >= 1
    at.run()
    assert len(calls) == n  # kept, not re-measured, on a plain rerun
    at.button(key="timeline_again_cache").click().run()
    assert not errors(at), errors(at)
    assert len(calls) == n + 1
    assert any("Measured at" in c.value or "measured at" in c.value.lower() for c in at.caption)
    assert any("CPU thread policy in force" in c.value for c in at.caption)
