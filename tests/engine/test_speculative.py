"""Speculative decoding: greedy equals plain greedy, sampled output follows p, caches roll back correctly."""
import numpy as np
import pytest
import torch

from engine.speculative.drafters import DrafterError, LookupDrafter, ModelDrafter, early_exit_model, make_drafter
from engine.core.prompt import encode_prompt
from engine.core.sampling import SamplingSettings, make_generator
from engine.speculative.decoding import race, speculative_generate, sweep_k, verify
from engine.speculative.records import expected_speedup
from engine.core.trace import generate_tokens
from engine.core.loop import crop, new_cache, prefill



pytestmark = pytest.mark.usefixtures("one_thread")


COPY_PROMPT = ("Repeat exactly: Attention looks back at every earlier token; the KV cache keeps their keys and "
               "values. Speculative decoding drafts tokens cheaply and verifies them in one pass.")


def _ids(lm, prompt=COPY_PROMPT):
    return list(encode_prompt(lm.tokenizer, prompt).ids)


N_TINY = 24


@pytest.fixture(scope="module")
def tiny_plain(tiny_lm):
    ids = _ids(tiny_lm)
    return ids, generate_tokens(tiny_lm, ids, SamplingSettings(), N_TINY, seed=0, stop_at_eos=False, record=False)[0]


@pytest.mark.parametrize("spec,k", [("lookup", 1), ("lookup", 4), ("lookup:1", 6), ("early-exit:1", 2),
                                    ("early-exit:1", 5), ("model:self", 1), ("model:self", 4),
                                    ("model:random:1", 3), ("model:random:1", 6)])
def test_greedy_speculative_equals_plain_greedy_tiny(tiny_lm, tiny_plain, spec, k):
    ids, plain = tiny_plain
    out, _, rounds, _ = speculative_generate(tiny_lm, ids, make_drafter(tiny_lm, spec), k, SamplingSettings(), N_TINY,
                                          0, stop_at_eos=False)
    assert out == plain
    assert all(len(r.drafted) <= k and 0 <= r.accepted <= len(r.drafted) for r in rounds)
    assert sum(len(r.emitted) for r in rounds) + 1 == len(out)
    if spec == "model:self":  # the target as its own draft is never wrong at temperature 0
        assert all(r.accepted == len(r.drafted) for r in rounds)
    if spec == "model:random:1":
        assert sum(r.accepted for r in rounds) < sum(len(r.drafted) for r in rounds)


def test_greedy_speculative_equals_plain_on_embedded(embedded_lm):
    ids = _ids(embedded_lm, "Quote exactly: The lighthouse at Hook Head has guided ships for more than eight "
                            "hundred years, and its stone walls are four metres thick.")
    runs = {}
    for spec, k in (("lookup", 5), ("early-exit:6", 3)):
        r = runs[spec] = race(embedded_lm, ids, spec, k, SamplingSettings(), 20, 0)
        assert r.identical, (spec, r.plain_ids, r.spec_ids)
        assert r.tokens_per_pass >= 1.0
    # quoting copies the prompt, so prompt lookup drafts and is accepted: fewer target passes than tokens
    assert runs["lookup"].accepted > 0 and runs["lookup"].target_passes < len(runs["lookup"].spec_ids)


def _chi2_ok(counts: np.ndarray, p: np.ndarray) -> float:
    """Pearson chi-square statistic over categories with p > 0."""
    n = counts.sum()
    m = p > 0
    assert counts[~m].sum() == 0, "emitted a token the target gives probability 0"
    e = n * p[m]
    return float(((counts[m] - e) ** 2 / e).sum())


@pytest.mark.parametrize("one_hot", [False, True])
def test_accept_resample_reproduces_target_distribution(one_hot):
    """Leviathan et al. 2023, thm. 3.5: x ~ q, accept with min(1, p/q), else draw from norm(max(0, p - q))
    emits tokens with law p. Tested on the real ``verify`` with a 6-token vocabulary and known p, q."""
    p = np.array([0.40, 0.25, 0.15, 0.10, 0.10, 0.0])
    q = np.array([0.05, 0.50, 0.05, 0.20, 0.10, 0.10])
    logits = torch.tensor(np.log(np.where(p > 0, p, 1e-30)), dtype=torch.float32).repeat(2, 1)  # [2, 6]
    logits[:, 5] = float("-inf")
    s = SamplingSettings(temperature=1.0)
    rng = np.random.default_rng(0)
    gen = make_generator(1)
    trials = 8000
    counts = np.zeros(6)
    for _ in range(trials):
        x = int(rng.choice(6, p=q))
        qt = None if one_hot else torch.tensor(q, dtype=torch.float32)[None]
        n, tok, kind, *_ = verify(logits, [x], qt, s, gen)
        counts[x if n == 1 else tok] += 1
    # 4 degrees of freedom: the 0.999 quantile is 18.5; a wrong rule (e.g. always keep x, law q) scores >> 1000.
    assert _chi2_ok(counts, p) < 18.5
    if not one_hot:  # expected acceptance sum_x min(p, q) = 0.05+0.25+0.05+0.10+0.10 = 0.55 at k = 1
        assert abs(_accepted_rate(logits, q, s) - 0.55) < 0.03


def _accepted_rate(logits, q, s, trials=3000):
    rng, gen, acc = np.random.default_rng(2), make_generator(3), 0
    qt = torch.tensor(q, dtype=torch.float32)[None]
    for _ in range(trials):
        acc += verify(logits, [int(rng.choice(len(q), p=q))], qt, s, gen)[0]
    return acc / trials


def test_one_hot_q_reduces_to_accept_with_p():
    """With a deterministic drafter (q one-hot at x), the rule accepts with p(x) and resamples p without x."""
    p = torch.tensor([0.7, 0.2, 0.1])
    logits = p.log().repeat(2, 1)
    gen, s = make_generator(5), SamplingSettings(temperature=1.0)
    res = [verify(logits, [1], None, s, gen) for _ in range(4000)]
    acc = np.mean([r[0] for r in res])
    assert abs(acc - 0.2) < 0.03
    corrections = [r[1] for r in res if r[0] == 0]
    assert 1 not in corrections  # the rejected token is never the correction
    assert abs(np.mean(np.array(corrections) == 0) - 0.7 / 0.8) < 0.04


def test_sampled_speculative_runs_and_stays_in_filtered_support(tiny_lm):
    ids = _ids(tiny_lm)
    s = SamplingSettings(temperature=0.8, top_k=5)
    for spec in ("lookup", "model:random:1", "early-exit:1"):
        r = race(tiny_lm, ids, spec, 3, s, 12, seed=7, stop_at_eos=False)
        assert len(r.spec_ids) == 12 and r.spec_prefill == "eager"  # each lane says how its prefill ran
        for rd in r.rounds:
            assert all(0.0 <= a <= 1.0 for a in rd.accept_probs)
            assert len(rd.target_top_ids) >= 1
            # every drafted token that was accepted had p > 0 under the same top-k filter
            assert all(pp > 0 for pp in rd.p[: rd.accepted])
        same = race(tiny_lm, ids, spec, 3, s, 12, seed=7, stop_at_eos=False)
        assert same.spec_ids == r.spec_ids  # a seed reproduces a sampled run


@torch.inference_mode()
def test_kv_cache_after_rollback_equals_fresh_pass(tiny_lm):
    """Feed junk drafts, roll back with crop, continue: logits equal a fresh pass over the kept tokens."""
    ids = _ids(tiny_lm)[:20]
    cache = new_cache(tiny_lm)
    prefill(tiny_lm, torch.tensor([ids[:12]]), cache)
    tiny_lm.model(input_ids=torch.tensor([[5, 6, 7, 8]]), past_key_values=cache, use_cache=True)  # rejected drafts
    crop(cache, 12)
    assert cache.get_seq_length() == 12
    cont = tiny_lm.model(input_ids=torch.tensor([ids[12:20]]), past_key_values=cache, use_cache=True).logits
    fresh = tiny_lm.model(input_ids=torch.tensor([ids[:20]]), use_cache=False).logits[:, 12:]
    torch.testing.assert_close(cont, fresh, atol=1e-4, rtol=1e-4)


@torch.inference_mode()
def test_model_drafter_cache_matches_after_partial_acceptance(tiny_lm):
    """After update(accepted) the draft's cache holds exactly context + accepted drafts, and its next
    proposal equals a drafter started fresh on the same context."""
    ids = _ids(tiny_lm)[:16]
    s = SamplingSettings()
    d = ModelDrafter(tiny_lm.model, "self")
    d.start(ids, s, make_generator(0))
    drafted, q = d.propose(ids, 4)
    assert q is None and len(drafted) == 4
    d.update(1)
    assert d.cache.get_seq_length() == len(ids) + 1
    ctx = ids + drafted[:1] + [17]  # one accepted, then a correction the draft never saw
    nxt, _ = d.propose(ctx, 3)
    fresh = ModelDrafter(tiny_lm.model, "self")
    fresh.start(ctx, s, make_generator(0))
    assert nxt == fresh.propose(ctx, 3)[0]


def test_lookup_drafter_continues_first_longest_match():
    d = LookupDrafter(3)
    ctx = [1, 2, 3, 4, 5, 6, 7, 9, 1, 2, 3, 8, 8, 2, 3]
    assert d.propose(ctx, 3) == ([4, 5, 6], None)  # "2 3" first seen before 4 5 6 (the source text)
    assert d.propose([1, 2, 3, 1, 2], 5) == ([3, 1, 2], None)
    assert d.propose([1, 2, 3], 4) == ([], None)  # no earlier occurrence of any suffix
    assert d.propose([5, 1, 6, 7, 1], 3) == ([], None)  # a lone repeated token is too weak a clue (min 2-gram)
    assert LookupDrafter(3, 1).propose([5, 1, 6, 7, 1], 3) == ([6, 7, 1], None)


def test_lookup_spec_sizes():
    assert (make_drafter(None, "lookup").max_ngram, make_drafter(None, "lookup").min_ngram) == (3, 2)
    d = make_drafter(None, "lookup:1")
    assert (d.max_ngram, d.min_ngram, d.name) == (1, 1, "lookup:1-1")
    d = make_drafter(None, "lookup:1-4")
    assert (d.max_ngram, d.min_ngram, d.name) == (4, 1, "lookup:1-4")
    for bad in ("lookup:x", "lookup:3-1", "lookup:2-"):
        with pytest.raises(DrafterError):
            make_drafter(None, bad)


def test_early_exit_view_shares_weights_and_leaves_target_alone(tiny_lm):
    target = tiny_lm.model
    before = [(n, id(m)) for n, m in target.named_modules()]
    view = early_exit_model(target, 1)
    assert [(n, id(m)) for n, m in target.named_modules()] == before  # no child of the target was replaced
    assert target.config.num_hidden_layers == 2 and len(target.model.layers) == 2
    assert view.model.layers[0] is target.model.layers[0] and len(view.model.layers) == 1
    assert view.model is not target.model and view.config.num_hidden_layers == 1
    assert {p.data_ptr() for p in view.parameters()} < {p.data_ptr() for p in target.parameters()}
    assert view.lm_head.weight is target.lm_head.weight
    with pytest.raises(DrafterError):
        early_exit_model(tiny_lm.model, 2)


def test_drafter_refuses_a_different_vocabulary(tiny_lm, embedded_lm):
    with pytest.raises(DrafterError, match="tokenizer"):
        make_drafter(embedded_lm, "model:tiny-random", loader=lambda name: tiny_lm)
    for bad in ("nonsense", "early-exit:x", "model:"):
        with pytest.raises(DrafterError):
            make_drafter(tiny_lm, bad)


def test_expected_speedup_formula():
    assert expected_speedup(0.0, 4, 0.0) == pytest.approx(1.0)
    assert expected_speedup(1.0, 4, 0.0) == pytest.approx(5.0)
    assert expected_speedup(0.8, 4, 0.1) == pytest.approx((1 - 0.8 ** 5) / (0.2 * 1.4))
    # a verify pass that costs 1.5 plain steps: k c + 1.5 in the denominator
    assert expected_speedup(0.8, 4, 0.1, verify=1.5) == pytest.approx((1 - 0.8 ** 5) / (0.2 * 1.9))


def test_sweep_k_small(tiny_lm):
    pts = sweep_k(tiny_lm, _ids(tiny_lm), "lookup", [1, 3], max_new_tokens=8)
    assert [p.k for p in pts] == [1, 3] and all(p.identical and p.tokens_per_pass >= 1 for p in pts)


def test_every_drafter_keeps_the_drafter_protocol(tiny_lm):
    """lookup, early exit and a draft model all offer what speculative_generate asks (engine.speculative.drafters.
    Drafter), checked against the protocol's own members."""
    from engine.speculative.drafters import Drafter

    members = [m for m in vars(Drafter) if not m.startswith("_")] + list(Drafter.__annotations__)
    assert {"start", "propose", "update", "name", "deterministic", "cost_layers"} <= set(members)
    for spec in ("lookup", "early-exit:1", "model:self"):
        d = make_drafter(tiny_lm, spec)
        missing = [m for m in members if not hasattr(d, m)]
        assert missing == [], (spec, missing)


def test_the_verify_pass_shape_is_warmed_up_before_anything_is_timed():
    """A race's first verify pass of k + 1 tokens must not be the first pass of that shape the model ever ran: that
    one picks and loads its kernels (on a GPU, each kernel's module on its first launch), and a short race would
    time it in its first round only (the race page's 16 tokens against the CLI's 64)."""
    from engine.core.loaded import ModelRef
    from engine.models.loading import load_model

    lm = load_model(ModelRef("tiny-random"), device="cpu")  # a fresh model: no width warmed yet
    widths = []
    hook = lm.model.register_forward_pre_hook(lambda m, a, kw: widths.append(int(kw["input_ids"].shape[1])),
                                              with_kwargs=True)
    try:
        ids = list(encode_prompt(lm.tokenizer, "The capital of France is Paris. The capital of France is", False).ids)
        speculative_generate(lm, ids, make_drafter(lm, "model:self"), 6, SamplingSettings(), 12, 0)
    finally:
        hook.remove()
    measured_prefill = widths.index(len(ids))  # the timed prefill over the prompt
    assert 7 in widths[:measured_prefill] and 7 in widths[measured_prefill:], widths
