"""Logit lens invariants: the last layer is the model's real output; earlier rows match an independent path
(transformers' own hidden states); chunking changes nothing."""
import numpy as np
import pytest
import torch

from engine.core import arch
from engine.attention.lens import logit_lens
from engine.core.prompt import encode_prompt


def _real_probs(lm, ids):
    with torch.inference_mode():
        return lm.model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float().softmax(-1)  # [n, vocab]


def test_tiny_lens_last_layer_is_the_real_output(tiny_lm):
    ids = list(range(7, 27))
    g = logit_lens(tiny_lm, ids, max_positions=8, top_k=3, chunk_layers=1)
    L = tiny_lm.info.n_layers
    assert g.top_ids.shape == (L + 1, 8, 3) and g.final_prob.shape == (L + 1, 8)
    assert list(g.positions) == list(range(12, 20)) and g.n_prompt == 20 and g.n_layers == L
    real = _real_probs(tiny_lm, ids)[12:]
    top = torch.topk(real, 3, dim=-1)
    np.testing.assert_array_equal(g.top_ids[-1], top.indices.numpy())
    np.testing.assert_allclose(g.top_probs[-1], top.values.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(g.final_prob[-1], g.top_probs[-1, :, 0], rtol=1e-5)
    assert np.all(np.diff(g.top_probs, axis=-1) <= 1e-7), "top-k must be sorted by probability"
    assert g.input_tokens == tuple(tiny_lm.tokenizer.decode([i]) for i in ids[12:])
    assert g.top_tokens[-1][0][0] == tiny_lm.tokenizer.decode([int(g.top_ids[-1, 0, 0])])


def test_tiny_lens_chunking_changes_nothing(tiny_lm):
    ids = list(range(30, 45))
    a = logit_lens(tiny_lm, ids, max_positions=100, chunk_layers=1)
    b = logit_lens(tiny_lm, ids, max_positions=100, chunk_layers=64)
    assert len(a.positions) == len(ids)  # capped at the prompt length
    np.testing.assert_array_equal(a.top_ids, b.top_ids)
    np.testing.assert_allclose(a.top_probs, b.top_probs, rtol=1e-6)


def test_embedded_lens_matches_model_output_and_hidden_states(embedded_lm):
    ids = list(encode_prompt(embedded_lm.tokenizer, "The capital of France is Paris, and the capital of Italy is",
                             use_chat_template=False).ids)
    p = 5
    g = logit_lens(embedded_lm, ids, max_positions=p)
    real = _real_probs(embedded_lm, ids)[-p:]
    np.testing.assert_array_equal(g.top_ids[-1, :, 0], real.argmax(-1).numpy())
    np.testing.assert_allclose(g.top_probs[-1, :, 0], real.max(-1).values.numpy(), rtol=1e-4, atol=1e-6)
    assert g.top_tokens[-1][-1][0].strip() == "Rome"  # the real model knows this one
    # middle layers through an independent path: transformers' own per-layer hidden states
    with torch.inference_mode():
        hs = embedded_lm.model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
        for layer in (0, 10, 20):
            want = arch.unembed(embedded_lm.model, hs[layer][0, -p:]).argmax(-1).numpy()
            np.testing.assert_array_equal(g.top_ids[layer, :, 0], want)
    # the prediction forms late: the lens at the embeddings does not already say "Rome"
    assert g.final_prob[0, -1] < g.final_prob[-1, -1]
