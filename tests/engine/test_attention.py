"""Attention invariants: recorded weights are causal and row-stochastic; summaries, GQA wiring, KV saving and
the timed attention wrapper are right."""
import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import repeat_kv

from engine.attention.analysis import (fit_power, first_token_pull, gqa_saving, growth_exponent,
                              head_entropy_bits, head_mean_distance, kv_groups, kv_head_of, measure_cost,
                              measure_forward)
from engine.core.kv import kv_bytes
from engine.core.prompt import encode_prompt
from engine.core.trace import ATTN_MAX, analyse_prompt
from engine.core.archfacts import analysis_pass
from engine.core.loop import full_pass, new_cache, prefill


def _check_causal_rows(att: np.ndarray, n_layers: int, n_heads: int, m: int) -> None:
    assert att.shape == (n_layers, n_heads, m, m)
    a = att.astype(np.float64)
    np.testing.assert_allclose(a.sum(-1), 1.0, atol=5e-3)  # float16 copy: rows sum to 1 within rounding
    upper = np.triu(np.ones((m, m), dtype=bool), k=1)
    assert np.all(a[..., upper] == 0), "a query attends to a future key"
    assert np.all(a >= 0)


def test_tiny_attention_rows_sum_to_one_and_are_causal(tiny_lm):
    ids = list(range(5, 25))
    a = analyse_prompt(tiny_lm, ids)
    _check_causal_rows(a.attentions, tiny_lm.info.n_layers, tiny_lm.info.n_heads, len(ids))
    # random weights still spread attention: a row that is not one-hot exists (the mask is not all that shows)
    assert (a.attentions.astype(np.float32).max(-1) < 0.99).any()


def test_embedded_attention_rows_sum_to_one_and_are_causal(embedded_lm):
    ids = list(encode_prompt(embedded_lm.tokenizer, "The cat sat on the mat.", use_chat_template=False).ids)
    a = analyse_prompt(embedded_lm, ids)
    info = embedded_lm.info
    _check_causal_rows(a.attentions, info.n_layers, info.n_heads, min(len(ids), ATTN_MAX))
    pull = first_token_pull(a.attentions)
    assert pull.heads_total == info.n_layers * info.n_heads
    assert 0 <= pull.heads_mostly_first <= pull.heads_total and 0 < pull.mean_weight_first < 1


def test_entropy_and_distance_on_known_patterns():
    m = 6
    uniform = np.tril(np.ones((m, m)))
    uniform /= uniform.sum(-1, keepdims=True)
    own = np.eye(m)
    first = np.zeros((m, m))
    first[:, 0] = 1
    att = np.stack([np.stack([uniform, own, first])])  # [1 layer, 3 heads, m, m]
    ent = head_entropy_bits(att)
    np.testing.assert_allclose(ent[0, 0], np.mean(np.log2(np.arange(1, m + 1))))
    np.testing.assert_allclose(ent[0, 1:], 0.0, atol=1e-12)
    dist = head_mean_distance(att)
    np.testing.assert_allclose(dist[0, 1], 0.0)
    np.testing.assert_allclose(dist[0, 2], np.mean(np.arange(m)))
    np.testing.assert_allclose(dist[0, 0], np.mean(np.arange(m) / 2))
    pull = first_token_pull(att)
    assert pull.heads_mostly_first == 2  # 'first' head, and the uniform row ties -> argmax picks position 0
    assert pull.heads_total == 3


def test_kv_groups_follow_transformers_repeat_kv():
    assert kv_groups(9, 3) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    n_heads, n_kv = 12, 4
    kv = torch.arange(n_kv, dtype=torch.float32).view(1, n_kv, 1, 1).expand(1, n_kv, 2, 3)  # value = kv index
    expanded = repeat_kv(kv, n_heads // n_kv)  # [1, n_heads, 2, 3]
    for k, group in enumerate(kv_groups(n_heads, n_kv)):
        for h in group:
            assert expanded[0, h, 0, 0].item() == k == kv_head_of(h, n_heads, n_kv)
    with pytest.raises(ValueError):
        kv_groups(9, 4)


def test_gqa_saving_matches_a_measured_cache(tiny_lm, embedded_lm):
    ids = list(range(3, 14))
    cache = new_cache(tiny_lm)
    prefill(tiny_lm, torch.tensor([ids]), cache)
    s = gqa_saving(tiny_lm.info, len(ids))
    assert s.bytes_gqa == kv_bytes(cache)
    info = embedded_lm.info
    e = gqa_saving(info, 1000)
    assert e.ratio == pytest.approx(info.n_heads / info.n_kv_heads) == pytest.approx(3.0)
    assert e.bytes_mha == 2 * info.n_layers * info.n_heads * info.head_dim * 1000 * info.bytes_per_value


def test_measured_attention_leaves_the_model_as_it_was(tiny_lm):
    model = tiny_lm.model
    before = model.config._attn_implementation
    pt = measure_forward(tiny_lm, 24, repeats=2)
    assert model.config._attn_implementation == before
    assert pt.tokens == 24 and len(pt.forward_s) == len(pt.attention_s) == 2
    assert all(0 < a < f for a, f in zip(pt.attention_s, pt.forward_s))


def test_measure_cost_reports_progress_in_order(tiny_lm):
    seen = []
    pts = measure_cost(tiny_lm, (32, 8, 16, 8), repeats=1, on_progress=lambda d, t: seen.append((d, t)))
    assert [p.tokens for p in pts] == [8, 16, 32]
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_fit_power_and_growth_exponent():
    n = [16, 32, 64, 128]
    t = [3e-6 * x**2 for x in n]
    assert fit_power(n, t, 2) == pytest.approx(3e-6)
    assert growth_exponent(n, t) == pytest.approx(2.0)
    assert growth_exponent(n, [1e-3 * x for x in n]) == pytest.approx(1.0)
    assert np.isnan(growth_exponent([16], [1.0]))


def test_recorded_weights_and_output_equal_transformers_eager_attention(tiny_lm):
    """The measuring attention (transformers' SDPA from its registry; eager math with our own key/value head
    repeat while recording) gives the weights and the logits of the same weights run with transformers' eager
    attention. The tiny model has grouped KV heads, so a wrong head repeat shows."""
    import copy

    from transformers import AutoModelForCausalLM

    from engine.core import instrument

    cfg = tiny_lm.model.config
    assert cfg.num_key_value_heads < cfg.num_attention_heads and instrument.measured(tiny_lm.model)
    # a copy of the config: from_config writes the attention implementation into the one it is given
    eager = AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager").eval()
    eager.load_state_dict(tiny_lm.model.state_dict())
    ids = torch.tensor([encode_prompt(tiny_lm.tokenizer, "The cat sat on the mat because it was warm", False).ids])
    with torch.no_grad():
        want = eager(input_ids=ids, output_attentions=True)
        plain = full_pass(tiny_lm, ids).logits
        recorded, got = analysis_pass(tiny_lm.model, ids, ids.shape[1])
    assert len(got) == len(want.attentions) == cfg.num_hidden_layers
    for g, w in zip(got, want.attentions):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(recorded, want.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(plain, want.logits, atol=1e-4, rtol=1e-4)
