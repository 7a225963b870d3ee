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
