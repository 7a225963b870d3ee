"""The sampling page's engine: stage records, draws, predictions at every position, and the stepper."""
import numpy as np
import pytest
import torch

from engine.sampling.positions import position_predictions
from engine.core.sampling import SamplingSettings, sampling_probs
from engine.sampling.stages import draw_at, draw_counts, stages, total_variation
from engine.sampling.stepper import Stepper
from engine.core.trace import run_trace
from engine.core.loop import new_cache, prefill


def peaked_logits(vocab: int = 500, seed: int = 0) -> np.ndarray:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(vocab, generator=g) * 2.5).numpy()


@pytest.mark.parametrize("s", [SamplingSettings(0.7, 20, 0.8, 0.05), SamplingSettings(1.3, 0, 0.5, 0.0),
                               SamplingSettings(1.0, 3, 1.0, 0.0), SamplingSettings(0.0, 5, 0.9, 0.1)])
def test_stages_are_consistent_with_the_sampling_functions(s):
    x = peaked_logits()
    st = stages(x, s, show=30)
    full = sampling_probs(torch.from_numpy(x), s).numpy()
    assert np.allclose(st.final, full[st.ids], atol=1e-7)
    assert np.array_equal(st.logits, np.sort(x)[::-1][:30]) and np.array_equal(x[st.ids], st.logits)
    assert np.all(st.keep_min_p <= st.keep_top_p) and np.all(st.keep_top_p <= st.keep_top_k)  # nested
    assert list(st.survivors) == sorted(st.survivors, reverse=True) and st.survivors[0] == x.size
    assert st.survivors[3] == int((full > 0).sum()) or s.greedy
    assert np.all(np.diff(st.cum_probs) >= -1e-7) and st.cum_probs[-1] <= 1 + 1e-6
    if s.greedy:
        assert st.final[0] == 1.0 and st.entropy_final_bits == 0.0 and np.allclose(st.scaled, st.logits)
    else:
        assert np.allclose(st.scaled, st.logits / s.temperature, rtol=1e-6)
        assert st.entropy_final_bits <= st.entropy_scaled_bits + 1e-6  # filtering never adds uncertainty
    if 0 < s.top_p < 1 and not s.greedy:  # the cut is where the cumulative curve first reaches p
        k = st.top_p_keep
        assert st.cum_probs[k - 1] >= s.top_p - 1e-5 and (k == 1 or st.cum_probs[k - 2] < s.top_p + 1e-5)
    hotter = stages(x, SamplingSettings(2.0))
    colder = stages(x, SamplingSettings(0.5))
    assert colder.entropy_final_bits < st.entropy_raw_bits < hotter.entropy_final_bits


def test_draw_counts_vectorised_and_seeded():
    x = peaked_logits()
    s = SamplingSettings(0.9, 40, 0.95, 0.0)
    a, b = draw_counts(x, s, 5000, seed=1), draw_counts(x, s, 5000, seed=1)
    assert a.counts.sum() == 5000 and np.array_equal(a.ids, b.ids) and np.array_equal(a.counts, b.counts)
    assert np.all(a.probs > 0)  # never a filtered token
    assert total_variation(a) < 0.05  # 40 tokens, 5000 draws: expected TV is about 0.03
    many = draw_counts(x, s, 100_000, seed=2)
    assert total_variation(many) < total_variation(a)  # converges as n grows
    greedy = draw_counts(x, SamplingSettings(0.0), 300, seed=0)
    assert list(greedy.ids) == [int(np.argmax(x))] and greedy.counts[0] == 300


def test_stepper_reproduces_the_loop_and_restarts(tiny_lm):
    """Stepping with draw_at under the loop's settings gives exactly the loop's tokens; every step's logits
    equal a full no-cache pass over the text so far; restarting crops the cache and replays identically."""
    s = SamplingSettings(1.0, 50, 0.95)
    tr = run_trace(tiny_lm, "The capital of France", s, max_new_tokens=8, seed=3, analyse=False)
    stp = Stepper(tr.prompt_ids, tr.first_logits)
    for k in range(len(tr.generated_ids)):
        stp.append(tiny_lm, draw_at(stp.logits[k], s, seed=3, step=k))
    assert stp.tokens == list(tr.generated_ids)
    assert stp.forward_passes == len(tr.generated_ids)  # one pass per appended token, none for step 0
    assert stp.cached_tokens() == len(tr.prompt_ids) + len(stp.tokens)
    x = torch.tensor([list(tr.prompt_ids) + stp.tokens[:5]])
    with torch.inference_mode():
        full = tiny_lm.model(input_ids=x, use_cache=False).logits[0, -1].float().numpy()
    np.testing.assert_allclose(stp.logits[5], full, atol=1e-4)
    before = [lg.copy() for lg in stp.logits]
    stp.restart(3)
    assert stp.step == 3 and len(stp.logits) == 4 and stp.cached_tokens() == len(tr.prompt_ids) + 3
    for tok in tr.generated_ids[3:6]:
        stp.append(tiny_lm, tok)
    for k in range(4, 7):
        np.testing.assert_allclose(stp.logits[k], before[k], atol=1e-5)
    stp.restart(0)
    assert stp.tokens == [] and stp.cached_tokens() == len(tr.prompt_ids)


def test_stepper_without_first_logits_prefills(tiny_lm):
    ids = list(tiny_lm.tokenizer("Once upon a time")["input_ids"])
    stp = Stepper(ids)
    first = stp.start(tiny_lm)
    with torch.inference_mode():
        ref = prefill(tiny_lm, torch.tensor([ids]), new_cache(tiny_lm))[0].numpy()
    np.testing.assert_allclose(first, ref, atol=1e-5)
    assert stp.forward_passes == 1


def test_stepper_concurrent_clicks_append_once_and_keep_the_cache_consistent(tiny_lm):
    """Two reruns may run the same button callback at once: the repeated click is ignored, and even
    unguarded concurrent appends leave the cache holding exactly prompt + tokens."""
    import threading

    ids = list(tiny_lm.tokenizer("Once upon a time")["input_ids"])
    first = Stepper(ids).start(tiny_lm)
    for at_step, expect in ((0, 1), (None, 2)):
        stp = Stepper(ids, first)
        threads = [threading.Thread(target=stp.append, args=(tiny_lm, 7, at_step)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert stp.step == expect and stp.forward_passes == expect
        assert stp.cached_tokens() == len(ids) + expect


def test_greedy_draw_is_argmax():
    x = peaked_logits(seed=4)
    assert draw_at(x, SamplingSettings(0.0), seed=9, step=5) == int(np.argmax(x))
    s = SamplingSettings(1.0)
    assert draw_at(x, s, seed=9, step=2) == draw_at(x, s, seed=9, step=2)


def test_position_predictions_from_one_pass(tiny_lm):
    ids = list(tiny_lm.tokenizer("The capital of France is Paris. The capital of Italy")["input_ids"])
    pp = position_predictions(tiny_lm, ids)
    n = len(ids)
    assert pp.top_ids.shape[0] == n and pp.actual_probs.shape == (n - 1,) and pp.actual_ranks.shape == (n - 1,)
    assert np.all(pp.actual_ranks >= 1) and np.all(pp.actual_probs <= pp.top_probs[:-1, 0] + 1e-7)
    top1 = pp.top_ids[:, 0][:-1] == np.asarray(ids[1:])
    assert np.array_equal(top1, pp.actual_ranks == 1)
    # The logits at position i of the single pass equal a separate pass over the first i + 1 tokens.
    for i in (0, n // 2, n - 2):
        with torch.inference_mode():
            lg = prefill(tiny_lm, torch.tensor([ids[: i + 1]]), new_cache(tiny_lm))[0].softmax(-1)
        assert abs(float(lg[ids[i + 1]]) - float(pp.actual_probs[i])) < 1e-5
        assert int((lg > lg[ids[i + 1]]).sum()) + 1 == int(pp.actual_ranks[i])


def test_the_stage_functions_run_on_one_thread_and_give_the_count_back(monkeypatch):
    """A 49k-element op split across threads saves nothing and suffers on a busy CPU: the stage functions run on one
    thread (on the engine worker, where the UI sends them), then restore the caller's count."""
    from engine.sampling import stages as S

    inside = []
    real = S.entropy_bits
    monkeypatch.setattr(S, "entropy_bits", lambda p: inside.append(torch.get_num_threads()) or real(p))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        S.stages(np.linspace(-3, 3, 50).astype(np.float32), SamplingSettings(0.7))
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert inside and set(inside) == {1} and after == 2
