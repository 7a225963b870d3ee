"""The loop picture's extra pass agrees with the trace it extends: at the prompt it reproduces the trace's
own embedding row, final hidden state and logits; one token later it predicts what the cached decode did."""
import numpy as np

from engine.core.sampling import SamplingSettings
from engine.loop.glance import last_position
from engine.core.trace import run_trace
from ui.loop.view import DECODE_START, STAGES, glance, next_position, previous_position


def test_last_position_matches_trace(tiny_lm):
    tr = run_trace(tiny_lm, "hello there", SamplingSettings(0.0, 0, 1.0), 3, 0, use_chat_template=False)
    lp = last_position(tiny_lm, tr.prompt_ids)
    a = tr.analysis
    np.testing.assert_allclose(lp.embedding, a.embedding_preview[-1], atol=1e-6)
    np.testing.assert_allclose(lp.hidden, a.hidden_preview, atol=1e-4)
    assert list(lp.top_ids) == list(tr.steps[0].top_ids[:5])
    np.testing.assert_allclose(lp.top_logits, np.sort(tr.first_logits)[::-1][:5], atol=1e-4)
    later = last_position(tiny_lm, tr.prompt_ids + tr.generated_ids[:1])  # no cache vs the cached decode step
    assert int(later.top_ids[0]) == tr.steps[1].top_ids[0] == tr.generated_ids[1]  # greedy


def test_glance_values_and_stepping(tiny_lm):
    tr = run_trace(tiny_lm, "hello there", SamplingSettings(0.0, 0, 1.0), 3, 0, use_chat_template=False)
    g0 = glance(tr, 0)
    assert g0.phase == "prefill" and g0.chosen_raw == tr.steps[0].token
    assert f"{len(tr.prompt_ids)} tokens in one pass" in g0.lines["blocks"][0]
    g1 = glance(tr, 1, last_position(tiny_lm, tr.prompt_ids + tr.generated_ids[:1]))
    assert g1.phase == "decode" and g1.chosen_raw == tr.steps[1].token
    assert g1.lines["blocks"][0].startswith("1 in +") and str(tr.generated_ids[0]) in g1.lines["ids"][0]
    last = len(STAGES) - 1
    assert next_position(0, last, 3) == (1, DECODE_START) and previous_position(1, DECODE_START) == (0, last)
    assert next_position(2, last, 3) == (2, last)  # the last token stays


def test_softmax_note_says_why_the_softmax_box_and_the_sampled_p_differ():
    """The softmax box is temperature 1; the sampled token's p is under the sidebar's settings: a line says so
    whenever they are not the same distribution, and only then."""
    from engine.core.sampling import SamplingSettings
    from ui.loop.view import TITLES, softmax_note

    assert "T = 1" in TITLES["softmax"]
    assert softmax_note(SamplingSettings(1.0, 0, 1.0)) is None
    greedy = softmax_note(SamplingSettings(0.0, 50, 0.95))
    assert "100%" in greedy and "temperature 1" in greedy
    sampled = softmax_note(SamplingSettings(0.7, 50, 0.95))
    assert "T 0.7 sharpens it" in sampled and "top-k / top-p" in sampled
    assert "flattens" in softmax_note(SamplingSettings(1.5, 0, 1.0))


def test_a_rare_drawn_token_is_not_shown_as_p_0(tiny_lm):
    """At a high temperature the loop can draw a rank-791 token: its "Sampled token" box read "p = 0.0%", as if it
    could not be drawn; below 0.1% the probability is written in scientific notation (as the steps table does)."""
    from dataclasses import replace

    from ui.frame.figures import percent_text
    from ui.loop.figures import top_probs_bar

    tr = run_trace(tiny_lm, "hello there", SamplingSettings(1.5, 0, 1.0), 2, 0, use_chat_template=False)
    rare = replace(tr, steps=(replace(tr.steps[0], prob=1.4e-4), *tr.steps[1:]))
    assert glance(rare, 0).lines["sampled"][1] == "p = 1.4e-04"
    assert glance(replace(tr, steps=(replace(tr.steps[0], prob=0.059), *tr.steps[1:])), 0).lines["sampled"][1] == \
        "p = 5.9%"
    assert percent_text(0.00049) == "4.9e-04" and percent_text(0.001) == "0.1%" and percent_text(0) == "0.0%"
    assert list(top_probs_bar(["a", "b"], [0.9, 2e-5], "b", "t").data[0].text) == ["2.0e-05", "90.0%"]
