"""The figures a saved run is drawn with take the record's words as text (issue 49): Plotly draws a subset of HTML
(<a href>, <b>, <br>, <span style>) in titles, legends and hover, so a device name, a drafter or a token must reach
it escaped."""
import dataclasses
import re

from engine.core.sampling import SamplingSettings
from engine.core.trace import run_trace
from engine.record.verify import Timing
from tests.record_edits import strings

LINK = '<a href="https://evil.example/">x</a>'
HTML = re.compile(r"<\s*a\b", re.I)




def _markup(fig) -> list[str]:
    return [s for s in strings(fig.to_plotly_json()) if HTML.search(s)]


def test_the_timings_legend_shows_a_device_name_as_text():
    from ui.record.figures import timings_chart

    fig = timings_chart([Timing("prefill", 0.01, 0.02)], LINK)
    assert _markup(fig) == [] and any("evil.example" in s for s in strings(fig.to_plotly_json()))


def test_the_step_bars_hover_shows_a_token_as_text(tiny_lm):
    from ui.frame.figures import step_times_bar

    tr = run_trace(tiny_lm, "hello", SamplingSettings(), max_new_tokens=3, seed=0)
    steps = [dataclasses.replace(s, token=LINK) for s in tr.steps]
    assert _markup(step_times_bar(steps)) == []


def test_the_race_legend_shows_a_drafter_as_text(tiny_lm):
    from engine.core.prompt import encode_prompt
    from engine.speculative.decoding import race
    from ui.frame.figures import progress_lines

    enc = encode_prompt(tiny_lm.tokenizer, "a b a b a b a b", False)
    run = race(tiny_lm, list(enc.ids), "lookup", 3, SamplingSettings(), 6, 0)
    assert _markup(progress_lines(dataclasses.replace(run, drafter=LINK))) == []
