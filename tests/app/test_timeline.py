"""AppTest: the prefill-vs-decode page runs every on-demand measurement on the tiny model without an error."""
from tests.app.test_pages import errors, run_page

PAGE = "pages/timeline.py"


def _click(at, label):
    [b for b in at.button if b.label == label][0].click()
    at.run()
    assert not errors(at), errors(at)


def test_timeline_page_measurements_on_tiny_model(passes):
    at = run_page(PAGE, model="tiny-random", max_new_tokens="5")
    assert not errors(at), errors(at)
    assert at.title[0].value.startswith("Prefill vs decode")
    metrics = {m.label: m.value for m in at.metric}
    assert "Time to first token" in metrics and metrics["Time to first token"].endswith("ms")
    at.slider(key="timeline_cmp_tokens").set_value(3)
    _click(at, "Run with and without the cache")
    assert any("Same tokens out" in s.value for s in at.success), [e.value for e in at.error]
    at.multiselect(key="timeline_sweep_lengths").set_value([8, 16])
    at.slider(key="timeline_sweep_new").set_value(2)
    at.slider(key="timeline_sweep_repeats").set_value(1)
    _click(at, "Run the sweep")
    table = at.dataframe[0].value
    rows = list(table["prompt tokens"])  # where prefill has not climbed yet, the sweep doubles the longest prompt
    assert rows[:2] == [8, 16] and all(b == 2 * a for a, b in zip(rows[1:], rows[2:])), rows
    assert any("climb" in m.value for m in at.markdown)
    # "which curve climbs?" is graded by this sweep's own shortest and longest prompt (or said to be too noisy)
    at.radio(key="timeline_sweep_try_pick").set_value("first token").run()
    assert not errors(at), errors(at)
    graded = "\n".join(m.value for m in at.markdown)
    assert ("This run decides:" in graded and "time to first token, longest prompt" in graded) or \
        "Too noisy to decide" in graded, graded[-2000:]
    at.slider(key="timeline_bd_repeats").set_value(1)
    _click(at, "Measure the stages")
    _click(at, "Measure the memory of one pass")
    labels = [m.label for m in at.metric]
    assert "Saved for backward" in labels and "Decode-step floor" in labels
    # the floor sentence comes from the step and the probe measured beside it (a lesson, or why it is not one)
    floor = [t.value for t in [*at.markdown, *at.warning] if "its floor" in t.value or "Not a lesson yet" in t.value]
    assert floor and any("n=5" in t or "Not a lesson yet" in t for t in floor), floor
    # a rerun with nothing changed keeps every result on screen and runs no forward pass (cached, not recomputed)
    shown = ([c.value for c in at.caption], [(m.label, m.value) for m in at.metric], list(table["prompt tokens"]))
    before = passes["n"]
    assert before > 0  # the hook sees this page's passes
    at.run()
    assert not errors(at), errors(at)
    assert passes["n"] == before, f"a rerun ran {passes['n'] - before} forward passes"
    assert ([c.value for c in at.caption], [(m.label, m.value) for m in at.metric],
            list(at.dataframe[0].value["prompt tokens"])) == shown
