"""AppTest: the batching page waits for its button, then runs the real scheduler and shows every chart."""
from tests.app.test_pages import errors, run_page


def test_batching_runs_on_demand_tiny(passes):
    at = run_page("pages/batching.py", model="tiny-random")
    assert not errors(at), errors(at)
    assert len(at.get("plotly_chart")) == 1  # only the generated workload before the button
    at.slider(key="batching_n").set_value(4)
    at.slider(key="batching_len").set_value((2, 5))
    at.multiselect(key="batching_sizes").set_value([1, 2])
    at.run()
    at.button(key="batching_run").click().run()
    assert not errors(at), errors(at)
    assert len(at.get("plotly_chart")) == 10
    table = at.dataframe[0].value
    assert list(table.columns) == ["static", "continuous"]
    assert table.loc["wasted decode rows", "continuous"].startswith("0 of")
    assert any("exactly the same tokens" in c.value for c in at.caption)
    # a rerun with the same settings keeps the results without another click and runs no forward pass
    before = passes["n"]
    assert before > 0  # the hook sees the experiment's passes
    at.run()
    assert not errors(at), errors(at)
    assert passes["n"] == before, f"a rerun ran {passes['n'] - before} forward passes"
    assert len(at.get("plotly_chart")) == 10 and at.dataframe[0].value.equals(table)


def test_batching_measure_again_measures_again(monkeypatch):
    from engine.batching import experiment as B

    calls = []
    real = B.decode_sweep
    monkeypatch.setattr(B, "decode_sweep", lambda *a, **kw: calls.append(a[1]) or real(*a, **kw))
    at = run_page("pages/batching.py", model="tiny-random")
    at.slider(key="batching_n").set_value(3)
    at.slider(key="batching_len").set_value((2, 3))
    at.multiselect(key="batching_sizes").set_value([1, 2])
    at.run()
    at.button(key="batching_run").click().run()
    assert not errors(at), errors(at)
    n = len(calls)
    at.run()
    assert len(calls) == n  # kept on a plain rerun
    at.button(key="batching_again").click().run()
    assert not errors(at), errors(at)
    assert len(calls) == n + 1 and calls[-1] == (1, 2)
    assert any("Measured at" in c.value for c in at.caption)


def test_lesson_note_follows_the_sweep():
    import numpy as np

    from engine.batching.records import SweepPoint
    from ui.batching.runs import sweep_lesson_note

    def pts(t8):
        return [SweepPoint(1, np.array([0.04] * 4), 10, 0, 4), SweepPoint(8, np.array([t8] * 4), 10, 0, 4)]

    assert sweep_lesson_note(pts(0.08)) is None  # 2x for 8 rows: agrees with "much less than 8 T"
    assert "This run differs" in sweep_lesson_note(pts(0.30))
