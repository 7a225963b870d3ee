"""AppTest for the sampling page: page-local dice re-sample with no forward pass; stepping runs exactly one."""
import pytest
import torch

from tests.app.test_pages import errors, run_page


def metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_dice_resample_without_forward_pass_and_stepping(passes):
    at = run_page("pages/sampling.py", model="tiny-random", max_new_tokens="4", temperature="0.7", seed="5")
    assert not errors(at), errors(at)
    assert at.slider(key="sampling_temperature").value == pytest.approx(0.7)  # defaults to the sidebar's
    assert at.number_input(key="sampling_seed").value == 5
    before = passes["n"]
    entropy = metric(at, "Entropy drawn from")

    at.slider(key="sampling_temperature").set_value(1.6).run()
    at.slider(key="sampling_top_p").set_value(0.5).run()
    at.slider(key="sampling_min_p").set_value(0.05).run()
    at.number_input(key="sampling_top_k").set_value(7).run()
    at.number_input(key="sampling_seed").set_value(11).run()
    at.select_slider(key="sampling_n").set_value(5000).run()
    assert not errors(at), errors(at)
    assert passes["n"] == before, "moving a sampling control ran the model"
    assert metric(at, "Entropy drawn from") != entropy
    assert int(metric(at, "Tokens left")) <= 7

    at.slider(key="sampling_temperature").set_value(0.0).run()
    assert any("greedy" in w.value for w in at.warning)
    assert passes["n"] == before

    # Step through generation: each append is exactly one forward pass (the first one prefills prompt + token).
    at.slider(key="sampling_temperature").set_value(1.0).run()
    for k in range(1, 4):
        at.button(key="sampling_append").click().run()
        assert not errors(at), errors(at)
        assert passes["n"] == before + k
        assert at.slider(key="sampling_view").value == k
    assert any("Text generated here so far" in m.value for m in at.markdown)
    # Look back at step 1 (no pass), go back there (no pass: the cache is cropped), append again (one pass).
    at.slider(key="sampling_view").set_value(1).run()
    assert passes["n"] == before + 3
    at.button(key="sampling_restart").click().run()
    assert passes["n"] == before + 3 and at.slider(key="sampling_view").value == 1
    at.button(key="sampling_append").click().run()
    assert passes["n"] == before + 4 and at.slider(key="sampling_view").max == 2
    at.button(key="sampling_start_over").click().run()
    assert not errors(at), errors(at)
    assert "sampling_view" not in [s.key for s in at.slider]


def test_reset_button_takes_the_sidebar_values_again():
    at = run_page("pages/sampling.py", model="tiny-random", max_new_tokens="2", temperature="0.3", top_p="0.8")
    at.slider(key="sampling_temperature").set_value(1.9).run()
    at.slider(key="sampling_top_p").set_value(0.2).run()
    at.button(key="sampling_reset").click().run()
    assert not errors(at), errors(at)
    assert at.slider(key="sampling_temperature").value == pytest.approx(0.3)
    assert at.slider(key="sampling_top_p").value == pytest.approx(0.8)
    assert torch.is_grad_enabled()  # the engine's inference_mode never leaks into the app thread


def test_greedy_caption_and_small_probabilities_not_shown_as_zero():
    """At T 0 the top-p caption says greedy keeps 1 token (it said "top-p keeps 32"); the every-position table keeps
    a tiny probability (tiny-random's are about 1/vocab) unrounded, where four decimals printed it as 0."""
    at = run_page("pages/sampling.py", model="tiny-random", max_new_tokens="2", temperature="0", top_p="0.9")
    assert not errors(at), errors(at)
    captions = " ".join(c.value for c in at.caption)
    assert "1 token is kept" in captions and "Top-p = 0.9 keeps" not in captions
    table = next(d.value for d in at.dataframe if "p(that token)" in d.value.columns)
    probs = table["p(that token)"].dropna()
    assert len(probs) and (probs > 0).all() and (probs < 1e-3).any(), probs.tolist()
