"""Embedding rows, PCA map, neighbours, RoPE angles and the relative-distance property, tied weights,
and the learned-position branch on a tiny GPT-2 built from a config."""
import numpy as np
import pytest
import torch

from engine.embeddings import analysis as E


def test_prompt_embeddings_are_table_rows(tiny_lm):
    ids = [5, 17, 5, 40]
    pe = E.prompt_embeddings(tiny_lm, ids)
    w = tiny_lm.model.get_input_embeddings().weight.detach().numpy()
    np.testing.assert_allclose(pe.vectors, w[ids], rtol=0, atol=0)
    np.testing.assert_allclose(pe.norms, np.linalg.norm(w[ids], axis=1), rtol=1e-5)
    np.testing.assert_allclose(np.diag(pe.cosine), 1.0, atol=1e-5)
    assert pe.cosine[0, 2] == pytest.approx(1.0, abs=1e-5)  # same token twice -> same vector
    np.testing.assert_allclose(pe.cosine, pe.cosine.T, atol=1e-6)
    lo, mid, hi = pe.vocab_norm_quantiles
    assert lo <= mid <= hi


def test_map_is_deterministic_and_prompt_rows_sit_on_their_sample_points(tiny_lm):
    m1 = E.embedding_map(tiny_lm, [3, 9], sample_size=tiny_lm.info.vocab_size, seed=1)
    m2 = E.embedding_map(tiny_lm, [3, 9], sample_size=tiny_lm.info.vocab_size, seed=1)
    np.testing.assert_array_equal(m1.sample_xy, m2.sample_xy)
    # with the whole vocabulary as the sample, a prompt token's point equals its own sample point
    for j, i in enumerate([3, 9]):
        k = int(np.where(m1.sample_ids == i)[0][0])
        np.testing.assert_allclose(m1.prompt_xy[j], m1.sample_xy[k], atol=1e-4)
    assert 0 < m1.explained[1] <= m1.explained[0] < 1
    assert abs(m1.sample_xy[:, 0].mean()) < 1e-3  # centred
    assert "svd" in m1.method


def test_nearest_tokens_by_cosine(tiny_lm):
    nb = E.nearest_tokens(tiny_lm, 7, k=5)
    w = torch.nn.functional.normalize(tiny_lm.model.get_input_embeddings().weight.float(), dim=-1)
    cos = (w @ w[7]).numpy()
    cos[7] = -9
    assert list(nb.ids) == list(np.argsort(-cos)[:5])
    assert 7 not in nb.ids and list(nb.cosines) == sorted(nb.cosines, reverse=True)


@pytest.mark.parametrize("which", ["tiny_lm", "embedded_lm"])
def test_rope_angles_follow_the_formula_and_the_module(which, request):
    lm = request.getfixturevalue(which)
    ra = E.rope_angles(lm, 40)
    d = ra.rotary_dim
    assert d == lm.info.head_dim and ra.base == lm.info.rope_theta
    p, i = 7, 3
    assert ra.angles[p, i] == pytest.approx(p * ra.base ** (-2 * i / d), rel=1e-9)
    assert ra.angles[0].max() == 0 and ra.angles[1, 0] == 1.0  # pair 0 turns one radian per position
    assert ra.module_max_diff < 1e-4


def test_rotated_scores_depend_only_on_relative_distance(embedded_lm):
    demo = E.relative_demo(embedded_lm, 1000, 2000, head=4, n_positions=48)
    assert demo.source.startswith("real layer-0")
    assert demo.value_range > 0.1  # position does change the score ...
    assert demo.max_spread < 1e-3 * demo.value_range  # ... but only through m - n
    assert demo.scores[0, 0] == pytest.approx(demo.no_rope_score, abs=1e-4)  # distance 0: no net rotation
    # real q/k: the same numbers as block 0's own projections
    q, k, _ = E.real_qk(embedded_lm, 1000, 2000, head=4)
    assert q.shape == (embedded_lm.info.head_dim,) and k.shape == q.shape


def test_relative_demo_unit_vectors_when_no_tokens(tiny_lm):
    demo = E.relative_demo(tiny_lm, n_positions=16)
    assert "random unit vectors" in demo.source and demo.max_spread < 1e-4
    assert demo.scores[0, 0] == pytest.approx(demo.no_rope_score, abs=1e-5)


def test_tied_embeddings(tiny_lm, embedded_lm):
    t = E.tied_check(embedded_lm)
    assert t.tied and t.same_storage and t.max_abs_diff == 0.0 and t.input_shape == t.output_shape
    u = E.tied_check(tiny_lm)  # the tiny model has its own head
    assert not u.tied and u.max_abs_diff > 0


@pytest.fixture(scope="module")
def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    from engine.models.loading import finish_load
    from engine.models.tiny import make_tiny_tokenizer

    tok = make_tiny_tokenizer()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=32, n_layer=1, n_head=2))
    return finish_load("tiny-gpt2", "tiny GPT-2 from a config", model, tok, torch.device("cpu"))


def test_learned_positions_branch(tiny_gpt2):
    lm = tiny_gpt2
    assert lm.info.position_encoding == "learned"
    assert E.rotary_module(lm) is None
    with pytest.raises(ValueError):
        E.rope_angles(lm)
    lp = E.learned_positions(lm, 100)  # asks for more than the table has
    assert lp.table_size == 32 and lp.vectors.shape == (32, 32)
    np.testing.assert_array_equal(lp.vectors, lm.model.transformer.wpe.weight.detach().numpy())
    np.testing.assert_allclose(np.diag(lp.cosine), 1.0, atol=1e-5)
    assert E.tied_check(lm).tied  # GPT-2 ties its head by default
    assert E.prompt_embeddings(lm, [1, 2]).vectors.shape == (2, 32)
