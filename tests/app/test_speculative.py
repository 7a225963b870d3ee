"""AppTest for the speculative race page: it races only when Start is pressed, answers every drafter, refuses
clearly, and judges the speedup against its bounds."""
import pytest

import ui.speculative as ui_spec
from tests.app.test_pages import errors, run_page

PAGE = "pages/speculative.py"


def _metric(at, label):
    return next(m.value for m in at.metric if m.label == label)


def _start(at):
    next(b for b in at.button if b.key == "speculative_go").click().run()
    assert not errors(at), errors(at)
    return at


@pytest.fixture
def race_calls(monkeypatch):
    """Counts the engine races the page starts (the page's module calls engine...speculative.race)."""
    calls = []
    real = ui_spec.race

    def counting(*a, **kw):
        calls.append(a[3] if len(a) > 3 else kw.get("k"))
        return real(*a, **kw)

    monkeypatch.setattr(ui_spec, "race", counting)
    return calls


def test_race_runs_only_when_start_is_pressed(race_calls):
    at = run_page(PAGE, model="tiny-random")
    assert not errors(at), errors(at)
    assert race_calls == [] and not any(m.label == "Measured speedup" for m in at.metric)
    _start(at)
    assert race_calls == [4] and _metric(at, "Identical output") == "yes"  # temperature 0 by default
    # moving controls never starts a race: the page waits for Start again
    at.slider(key="speculative_k").set_value(2).run()
    at.radio(key="speculative_drafter").set_value("model:self").run()
    assert not errors(at), errors(at)
    assert race_calls == [4] and not any(m.label == "Measured speedup" for m in at.metric)
    _start(at)
    assert race_calls == [4, 2]
    assert _metric(at, "Acceptance rate a") == "100%"  # the target as its own draft, temperature 0
    assert float(_metric(at, "Tokens per target pass")) >= 1.0
    # a plain rerun shows the kept result without racing
    at.run()
    assert race_calls == [4, 2] and _metric(at, "Acceptance rate a") == "100%"


def test_sampled_race_explains_why_lanes_differ():
    at = run_page(PAGE, model="tiny-random")
    at.slider(key="speculative_temperature").set_value(0.8).run()
    _start(at)
    assert any("min(1, p/q)" in i.value for i in at.info)


def test_no_accepted_draft_shows_no_gain():
    """model:random:2 at temperature 0 on the tiny model: its drafts are (almost surely) all rejected, so the
    page must show "no gain" whatever the clock said, never a speedup."""
    at = run_page(PAGE, model="tiny-random")
    at.radio(key="speculative_drafter").set_value("model:random").run()
    _start(at)
    acc = _metric(at, "Acceptance rate a")
    if acc != "0%":
        pytest.skip(f"the random draft happened to guess right ({acc})")
    assert _metric(at, "Measured speedup") == "no gain"
    assert any("No gain" in i.value for i in at.info)


def test_impossible_speedup_is_flagged(monkeypatch):
    """A speedup above k + 1 (as a disturbed plain lane produced: 17.5x at k = 4) is flagged, not praised."""
    from engine.experiments import speculative as S

    real = ui_spec.race

    def disturbed(*a, **kw):
        r = real(*a, **kw)
        slow_plain = tuple(s * 40 for s in r.plain_step_seconds)  # as if something stole the plain lane's CPU
        return S.SpecRun(**{**r.__dict__, "plain_step_seconds": slow_plain})

    monkeypatch.setattr(ui_spec, "race", disturbed)
    at = run_page(PAGE, model="tiny-random")
    at.radio(key="speculative_drafter").set_value("model:self").run()
    _start(at)
    assert any("Impossible" in w.value and "k + 1" in w.value for w in at.warning)
    assert not any("as fast" in s.value for s in at.success)


def test_other_model_with_another_tokenizer_is_refused(embedded_lm):
    at = run_page(PAGE, model="tiny-random")
    at.radio(key="speculative_drafter").set_value("model:other").run()
    at.text_input(key="speculative_other").set_value("embedded").run()
    next(b for b in at.button if b.key == "speculative_go").click().run()
    assert not errors(at), errors(at)
    assert any("different tokenizer" in e.value for e in at.error)


def test_k_sweep_on_demand():
    at = run_page(PAGE, model="tiny-random")
    at.number_input(key="speculative_tokens").set_value(8).run()
    _start(at)
    assert not any("Best k" in m.value or "No k" in m.value for m in at.markdown)
    next(b for b in at.button if b.key == "speculative_sweep").click().run()
    assert not errors(at), errors(at)
    assert any("Best k" in m.value or "No k made" in m.value for m in at.markdown)


def test_early_exit_on_a_two_block_model_races_without_a_slider():
    """tiny-random has 2 blocks, so early exit can only stop after block 1: a slider from 1 to 1 was an exception."""
    at = run_page(PAGE, model="tiny-random")
    at.radio(key="speculative_drafter").set_value("early-exit").run()
    assert not errors(at), errors(at)
    assert any("L = 1 block" in c.value for c in at.caption)
    _start(at)
    assert any(m.label == "Measured speedup" for m in at.metric)
