"""AppTest for the speculative race page: it races only when Start is pressed, answers every drafter, refuses
clearly, and judges the speedup against its bounds."""
import pytest

import engine.speculative.repeats as ui_spec  # the page's races run through race_repeats, which calls race
from engine.speculative.repeats import default_repeats
from tests.app.test_pages import errors, run_page, shown

PAGE = "pages/speculative.py"
RACES = default_repeats() + 1  # one Start: a warm-up race, then ILE_RACE_REPEATS measured races (5 unless set)


def _metric(at, label):
    return next(m.value for m in at.metric if m.label == label)


def _start(at):
    next(b for b in at.button if b.key == "speculative_go").click().run()
    assert not errors(at), errors(at)
    return at


@pytest.fixture
def race_calls(monkeypatch):
    """Counts the engine races the page starts (RACES per Start: race_repeats calls engine...speculative.race)."""
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
    assert race_calls == [4] * RACES and _metric(at, "Identical output") == "yes"  # temperature 0 by default
    # moving controls never starts a race: the page says what changed and keeps the last race, labelled k = 4
    at.slider(key="speculative_k").set_value(2).run()
    assert not errors(at), errors(at)
    assert race_calls == [4] * RACES and any("k 4 \u2192 2" in i.value and "Start the race" in i.value for i in at.info)
    assert any("k = 4" in h.value for h in at.header) and any("k = 4" in m.value for m in at.markdown)
    at.radio(key="speculative_drafter").set_value("model:self").run()
    assert not errors(at), errors(at)
    assert race_calls == [4] * RACES and any("drafter lookup \u2192 model:self" in shown(i.value) for i in at.info)
    _start(at)
    assert not any("Changed:" in i.value for i in at.info)
    assert race_calls == [4] * RACES + [2] * RACES
    assert _metric(at, "Acceptance rate a") == "100%"  # the target as its own draft, temperature 0
    assert float(_metric(at, "Tokens per target pass")) >= 1.0
    # a plain rerun shows the kept result without racing
    at.run()
    assert race_calls == [4] * RACES + [2] * RACES and _metric(at, "Acceptance rate a") == "100%"


def test_sampled_race_explains_why_lanes_differ():
    at = run_page(PAGE, model="tiny-random")
    at.slider(key="speculative_temperature").set_value(0.8).run()
    _start(at)
    assert any("min(1, p/q)" in i.value for i in at.info)


def test_no_accepted_draft_shows_no_gain():
    """model:random:2 on the tiny model at temperature 0: the seeds that decide the outcome are pinned (the draft's
    weights: seed 0 in engine/speculative/drafters.py; the target's: seed 0 in engine/models/tiny.py; at temperature
    0 the race's own seed plays no part), and with them every draft is rejected. That is asserted, so a change to the
    drafter, the target or the race fails here instead of skipping; and the page must show "no gain" whatever the
    clock said, never a speedup."""
    at = run_page(PAGE, model="tiny-random")
    at.radio(key="speculative_drafter").set_value("model:random").run()
    at.slider(key="speculative_temperature").set_value(0.0).run()
    _start(at)
    acc = _metric(at, "Acceptance rate a")
    assert acc == "0%", f"the seeded random draft was accepted ({acc}): the drafter or the target changed"
    assert _metric(at, "Measured speedup") == "no gain"
    assert any("No gain" in i.value for i in at.info)


def test_impossible_speedup_is_flagged(monkeypatch):
    """A speedup above k + 1 (as a disturbed plain lane produced: 17.5x at k = 4) is flagged, not praised."""
    from engine.speculative import records as S

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
    # a verdict: a best k, none, or (the plain lane's identical runs timed far apart) noise
    assert any("Best k" in m.value or "No k made" in m.value or "This sweep is noise" in m.value
               for m in at.markdown)


def test_early_exit_on_a_two_block_model_races_without_a_slider():
    """tiny-random has 2 blocks, so early exit can only stop after block 1: a slider from 1 to 1 was an exception."""
    at = run_page(PAGE, model="tiny-random")
    at.radio(key="speculative_drafter").set_value("early-exit").run()
    assert not errors(at), errors(at)
    assert any("L = 1 block" in c.value for c in at.caption)
    _start(at)
    assert any(m.label == "Measured speedup" for m in at.metric)


def _open_link(**query):
    """The race page opened directly from a shared link with these URL values (tiny model)."""
    from streamlit.testing.v1 import AppTest

    from ui.frame import nav

    at = AppTest.from_file(str(nav.ROOT / "app.py"), default_timeout=240)
    for k, v in {"model": "tiny-random", **query}.items():
        at.query_params[k] = v
    at.switch_page(PAGE)
    at.run()
    return at


def test_race_settings_round_trip_through_the_url():
    """The race's prompt preset, drafter, k and temperature go into the link, and a link opens them."""
    at = run_page(PAGE, model="tiny-random")
    at.selectbox(key="speculative_prompt").set_value(next(o for o in at.selectbox(key="speculative_prompt").options
                                                          if o.startswith("story"))).run()
    at.radio(key="speculative_drafter").set_value("model:self").run()
    at.slider(key="speculative_k").set_value(7).run()
    at.slider(key="speculative_temperature").set_value(0.35).run()
    assert not errors(at), errors(at)
    q = {k: at.query_params[k] for k in at.query_params}
    q = {k: v[0] if isinstance(v, list) else v for k, v in q.items()}
    assert (q["race_prompt"], q["race_drafter"], q["race_k"], q["race_t"]) == ("story", "model:self", "7", "0.35")

    again = _open_link(race_prompt="story", race_drafter="model:self", race_k="7", race_t="0.35")
    assert not errors(again), errors(again)
    assert again.selectbox(key="speculative_prompt").value.startswith("story")
    assert again.radio(key="speculative_drafter").value == "model:self"
    assert again.slider(key="speculative_k").value == 7 and again.slider(key="speculative_temperature").value == 0.35
    _start(again)
    assert any("model:self, k = 7" in shown(m.value) for m in again.markdown)


def test_hostile_race_values_in_the_url_fall_back_to_defaults():
    at = _open_link(race_prompt="<script>", race_drafter="nope", race_k="999", race_t="nan")
    assert not errors(at), errors(at)
    assert at.radio(key="speculative_drafter").value == "lookup"
    assert at.slider(key="speculative_k").value == 16 and at.slider(key="speculative_temperature").value == 0.0


def test_lanes_that_did_the_same_work_are_never_shown_winning(monkeypatch):
    """Nothing drafted (prompt lookup on an open prompt): each speculative round is a plain decode step, so the
    lanes did the same work. However their clocks differ (here the plain lane was slowed 1.2x, as a busy moment
    does), the page says the gap is noise under the lanes and on the chart, and shows no speedup."""
    from engine.speculative import records as S

    real = ui_spec.race

    def nothing_drafted(*a, **kw):
        r = real(*a, **kw)
        rounds = tuple(S.SpecRound(**{**rd.__dict__, "drafted": (), "p": (), "q": (), "accepted": 0})
                       for rd in r.rounds)
        slow = tuple(s * 1.2 for s in r.plain_step_seconds)
        return S.SpecRun(**{**r.__dict__, "rounds": rounds, "spec_ids": r.plain_ids, "spec_tokens": r.plain_tokens,
                            "plain_step_seconds": slow})

    monkeypatch.setattr(ui_spec, "race", nothing_drafted)
    at = run_page(PAGE, model="tiny-random")
    at.number_input(key="speculative_tokens").set_value(8).run()
    _start(at)
    assert any("No race: both lanes did the same work" in w.value and "noise" in w.value for w in at.warning)
    assert any("Nothing was drafted" in i.value and "noise" in i.value for i in at.info)
    assert _metric(at, "Measured speedup") == "n/a" and not at.success
    chart = next(c for c in at.get("plotly_chart") if "tokens written" in c.proto.spec or "same work" in c.proto.spec)
    assert "gap between them is noise" in chart.proto.spec


def test_the_race_has_its_own_prompt_box(race_calls):
    """Racing your own text needs no trip to the sidebar: the page's own box, kept in the link."""
    at = run_page(PAGE, model="tiny-random")
    at.selectbox(key="speculative_prompt").set_value(next(o for o in at.selectbox(key="speculative_prompt").options
                                                          if o.startswith("your own text"))).run()
    assert not errors(at), errors(at)
    box = at.text_area(key="speculative_text")
    assert box.value == at.text_area(key="w_prompt").value  # it starts with the sidebar prompt
    box.set_value("Quote: the cat sat on the mat. The cat sat on the mat.").run()
    _start(at)
    q = {k: at.query_params[k] for k in at.query_params}
    q = {k: v[0] if isinstance(v, list) else v for k, v in q.items()}
    assert q["race_prompt"] == "own" and q["race_text"].startswith("Quote: the cat sat")
    again = _open_link(race_prompt="own", race_text="Quote: the dog sat.")
    assert not errors(again), errors(again)
    assert again.text_area(key="speculative_text").value == "Quote: the dog sat."
    old = _open_link(race_prompt="sidebar")  # a link made when the option was "the sidebar prompt"
    assert old.selectbox(key="speculative_prompt").value.startswith("your own text")


def test_a_race_whose_shared_prefill_was_timed_far_apart_is_noise_not_a_win(monkeypatch):
    """Issue 52's race: the plain lane's prefill timed 2,630 ms and the speculative lane's 723 ms (the same work),
    while speculation was slower decode only (0.73x): its own wall clock read "1.22x as fast". The page must flag
    the pair and call the result noise: never a win (nor a loss)."""
    from engine.speculative import records as S

    real = ui_spec.race

    def prefill_apart(*a, **kw):
        r = real(*a, **kw)
        pn, sn = len(r.plain_ids) - 1, len(r.spec_ids) - 1
        f = (sn * r.plain_decode_seconds) / (pn * r.spec_decode_seconds * 0.73)  # decode only: 0.73x
        rounds = tuple(S.SpecRound(**{**rd.__dict__, "draft_seconds": rd.draft_seconds * f,
                                      "verify_seconds": rd.verify_seconds * f}) for rd in r.rounds)
        return S.SpecRun(**{**r.__dict__, "rounds": rounds, "spec_prefill_seconds": 0.723,
                            "plain_step_seconds": (2.630,) + r.plain_step_seconds[1:]})

    monkeypatch.setattr(ui_spec, "race", prefill_apart)
    at = run_page(PAGE, model="tiny-random")
    at.radio(key="speculative_drafter").set_value("model:self").run()
    at.number_input(key="speculative_tokens").set_value(12).run()
    _start(at)
    assert any("Noise, not a result" in w.value and "2,630 ms" in w.value and "723 ms" in w.value
               for w in at.warning), [w.value for w in at.warning]
    assert not at.success and not any("as fast" in w.value or "slower" in w.value for w in at.warning)
