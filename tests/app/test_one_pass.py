"""One analysis per prompt: the sampling and attention pages read per-position predictions, attention weights and
the logit lens from the trace's one analysis pass; opening them after the home page runs no pass at all."""
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.test_pages import errors
from ui.frame import nav


@pytest.mark.parametrize("page", ["pages/sampling.py", "pages/attention.py"])
def test_page_runs_no_second_pass_for_the_prompt(passes, page):
    at = AppTest.from_file(str(nav.ROOT / "app.py"), default_timeout=240)
    for k, v in {"model": "tiny-random", "max_new_tokens": "3", "temperature": "0",
                 "prompt": f"one pass only, please ({page})"}.items():
        at.query_params[k] = v
    at.run()  # the home page: the trace (prefill, decode steps, ONE analysis pass) and its block walk
    assert not errors(at), errors(at)
    home = passes["n"]
    assert home >= 3 + 1
    at.switch_page(page)
    at.run()
    assert not errors(at), errors(at)
    assert passes["n"] == home, f"{page} ran {passes['n'] - home} more forward pass(es) for the same prompt"


def _home(prompt: str, **query) -> AppTest:
    at = AppTest.from_file(str(nav.ROOT / "app.py"), default_timeout=240)
    for k, v in {"model": "tiny-random", "max_new_tokens": "4", "prompt": prompt, **query}.items():
        at.query_params[k] = v
    at.run()
    assert not errors(at), errors(at)
    return at


def test_greedy_run_is_reused_when_only_top_k_top_p_or_seed_move(passes):
    """At temperature 0 the argmax decides every token: top-k, top-p and the seed cannot change one, so moving
    them runs no pass (and the trace says the settings the sidebar shows)."""
    at = _home("greedy reuse, please", temperature="0")
    before = passes["n"]
    at.sidebar.number_input(key="w_top_k").set_value(7).run()
    at.sidebar.number_input(key="w_seed").set_value(5).run()
    at.sidebar.slider(key="w_min_p").set_value(0.3).run()
    assert not errors(at), errors(at)
    assert passes["n"] == before, "a greedy run was generated again for settings that cannot change it"
    assert at.query_params["min_p"] == "0.3"  # kept in the page address like the other settings
    from engine.core.loaded import ModelRef
    from engine.core.request import RunRequest
    from engine.core.sampling import SamplingSettings
    from ui.frame.runs import trace_for

    tr = trace_for(RunRequest(ModelRef("tiny-random"), "greedy reuse, please", True, 4,
                              SamplingSettings(0.0, 7, 0.95, 0.3), 5))
    assert tr.settings.top_k == 7 and tr.settings.min_p == 0.3 and tr.seed == 5 and tr.analysis is not None


def test_a_sampled_nudge_reruns_the_generation_only(passes):
    """Another temperature draws other tokens: the generation runs again (prefill + decode steps), the prompt's
    analysis pass does not."""
    at = _home("sampled nudge, please", temperature="0.7")
    before = passes["n"]
    at.sidebar.slider(key="w_temperature").set_value(0.75).run()
    assert not errors(at), errors(at)
    from engine.core.loaded import ModelRef
    from engine.core.request import RunRequest
    from engine.core.sampling import SamplingSettings
    from ui.frame.runs import trace_for

    tr = trace_for(RunRequest(ModelRef("tiny-random"), "sampled nudge, please", True, 4,
                              SamplingSettings(0.75, 50, 0.95), 0))
    assert tr.settings.temperature == 0.75
    assert passes["n"] - before == len(tr.steps), "the nudge ran more than the generation (prefill + decode steps)"
    before = passes["n"]
    at.sidebar.slider(key="w_min_p").set_value(0.2).run()  # a sampled run's min-p is part of what it draws from
    assert not errors(at), errors(at)
    tr = trace_for(RunRequest(ModelRef("tiny-random"), "sampled nudge, please", True, 4,
                              SamplingSettings(0.75, 50, 0.95, 0.2), 0))
    assert tr.settings.min_p == 0.2
    assert passes["n"] - before == len(tr.steps), "a min-p nudge did not run the generation again, alone"


def test_a_link_with_min_p_runs_and_says_it(passes):
    """?min_p= in a link sets the sidebar's slider, the run draws with it, and the loop page's lesson names it."""
    at = _home("min-p from a link, please", temperature="0.7", min_p="0.25")
    assert at.sidebar.slider(key="w_min_p").value == 0.25
    from engine.core.loaded import ModelRef
    from ui.frame.runs import kept

    tr = kept(at.session_state["settings"].run(ModelRef("tiny-random")))
    assert tr is not None and tr.settings.min_p == 0.25
    assert any("min-p 0.25" in m.value for m in at.markdown), "the lesson does not name the run's min-p"
