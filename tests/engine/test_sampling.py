"""engine.core.sampling against transformers' own logits warpers, seeded reproducibility, greedy, and a
statistical test that draws follow the sampling distribution."""
import itertools
import math

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList, MinPLogitsWarper, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper,
)

from engine.core.sampling import SamplingSettings, filter_logits, make_generator, sample, sampling_probs

VOCAB = 300
TEMPERATURES = [0.3, 0.7, 1.0, 1.6]
TOP_KS = [0, 1, 7, 50, VOCAB, 10 * VOCAB]  # 0 = off; VOCAB and above keep everything
TOP_PS = [0.0, 0.05, 0.5, 0.9, 0.999, 1.0]  # 0 keeps only the most likely token; 1 = off
MIN_PS = [0.0, 0.02, 0.3, 1.0]


pytestmark = pytest.mark.usefixtures("one_thread")


def hf_chain(s: SamplingSettings) -> LogitsProcessorList:
    """The warpers transformers' generate() builds for these settings, in its order."""
    procs = LogitsProcessorList()
    if s.temperature != 1.0:
        procs.append(TemperatureLogitsWarper(s.temperature))
    if s.top_k != 0:
        procs.append(TopKLogitsWarper(s.top_k))
    if s.top_p < 1.0:
        procs.append(TopPLogitsWarper(s.top_p))
    if s.min_p > 0.0:
        procs.append(MinPLogitsWarper(s.min_p))
    return procs


def random_logits(seed: int, rows: int = 6, ties: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, VOCAB, generator=g) * 3.0  # [rows, vocab]
    if ties:  # coarse values: many exact ties, also at the top-k / top-p / min-p boundaries
        x = torch.round(x)
    return x


def assert_same_filtering(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert torch.equal(torch.isinf(ours), torch.isinf(theirs)), "different tokens removed"
    kept = ~torch.isinf(ours)
    torch.testing.assert_close(ours[kept], theirs[kept], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ours.softmax(-1), theirs.softmax(-1), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("ties", [False, True], ids=["continuous", "ties"])
def test_filters_match_transformers_warpers(ties):
    """Every combination of the grid, several random rows each: same tokens removed, same probabilities."""
    logits = random_logits(1 if ties else 0, ties=ties)
    ids = torch.zeros(logits.shape[0], 1, dtype=torch.long)
    checked = 0
    for t, k, p, m in itertools.product(TEMPERATURES, TOP_KS, TOP_PS, MIN_PS):
        s = SamplingSettings(t, k, p, m)
        ours = filter_logits(logits, s)
        theirs = hf_chain(s)(ids, logits.clone())
        assert_same_filtering(ours, theirs)
        torch.testing.assert_close(sampling_probs(logits, s), theirs.softmax(-1), rtol=1e-5, atol=1e-7)
        checked += 1
    assert checked == len(TEMPERATURES) * len(TOP_KS) * len(TOP_PS) * len(MIN_PS)


def test_edge_cases_keep_the_right_number_of_tokens():
    logits = random_logits(2)
    kept = lambda s: (~torch.isinf(filter_logits(logits, s))).sum(-1)  # noqa: E731
    assert (kept(SamplingSettings(1.0, top_k=10 * VOCAB)) == VOCAB).all()  # k larger than the vocabulary
    assert (kept(SamplingSettings(1.0, top_k=7)) == 7).all()
    assert (kept(SamplingSettings(1.0, top_p=0.0)) == 1).all()  # top-p 0 keeps only the argmax
    assert (kept(SamplingSettings(1.0, min_p=1.0)) == 1).all()
    only = filter_logits(logits, SamplingSettings(1.0, top_p=0.0)).argmax(-1)
    assert torch.equal(only, logits.argmax(-1))
    # A tie at the k-th place keeps every tied token (as transformers does).
    tied = torch.tensor([[5.0, 3.0, 3.0, 3.0, 1.0]])
    assert int((~torch.isinf(filter_logits(tied, SamplingSettings(1.0, top_k=2)))).sum()) == 4
    # Probabilities are always a distribution over the survivors.
    for s in [SamplingSettings(0.5, 3, 0.5, 0.1), SamplingSettings(2.0, 0, 0.9, 0.0)]:
        torch.testing.assert_close(sampling_probs(logits, s).sum(-1), torch.ones(logits.shape[0]))


def test_seeded_sampling_is_reproducible():
    logits = random_logits(3, rows=200)
    s = SamplingSettings(1.0, 0, 1.0)
    a = sample(logits, s, make_generator(42))
    b = sample(logits, s, make_generator(42))
    c = sample(logits, s, make_generator(43))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)  # 200 draws from wide distributions: identical by chance is impossible
    # One generator advanced step by step gives the same sequence again when re-seeded.
    g1, g2 = make_generator(7), make_generator(7)
    seq1 = [int(sample(logits[0], s, g1)) for _ in range(20)]
    seq2 = [int(sample(logits[0], s, g2)) for _ in range(20)]
    assert seq1 == seq2 and len(set(seq1)) > 1


def test_greedy_is_argmax_and_ignores_the_generator():
    logits = random_logits(4, rows=50)
    for s in [SamplingSettings(0.0), SamplingSettings(0.0, top_k=3, top_p=0.2, min_p=0.5)]:
        assert torch.equal(sample(logits, s, make_generator(1)), logits.argmax(-1))
        assert torch.equal(sample(logits, s, make_generator(2)), logits.argmax(-1))
        probs = sampling_probs(logits, s)
        assert torch.equal(probs.argmax(-1), logits.argmax(-1)) and torch.all(probs.max(-1).values == 1.0)


def chi2_quantile(df: int, z: float) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile at standard-normal quantile z."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2_stat(counts: torch.Tensor, probs: torch.Tensor, n: int) -> tuple[float, int]:
    """Pearson's statistic over tokens with expected count >= 5 (the rest pooled into one bin)."""
    expected = probs.double() * n
    big = expected >= 5
    obs = torch.cat([counts[big].double(), counts[~big].double().sum().reshape(1)])
    exp = torch.cat([expected[big], expected[~big].sum().reshape(1)])
    if exp[-1] < 5:  # pool too small to test: merge it into the smallest big bin
        obs, exp = obs[:-1].clone(), exp[:-1].clone()
        obs[-1] += counts[~big].sum()
        exp[-1] += expected[~big].sum()
    return float(((obs - exp) ** 2 / exp).sum()), int(obs.numel()) - 1


@pytest.mark.parametrize("settings", [SamplingSettings(1.0), SamplingSettings(0.8, 40, 0.9, 0.02)],
                         ids=["plain", "filtered"])
def test_histogram_of_draws_converges_to_the_probabilities(settings):
    """N draws through engine.core.sampling.sample (the loop's own function): Pearson's chi-square stays below
    its 1-in-10^6 quantile (z = 4.75; fixed seed, so the test is deterministic), and the same statistic
    rejects a wrong distribution, so the test can fail."""
    n = 40_000
    logits = random_logits(5, rows=1)[0] * 0.6  # [vocab] moderately peaked
    probs = sampling_probs(logits, settings)
    picks = sample(logits.expand(n, VOCAB), settings, make_generator(2024))  # [n] one draw per row
    counts = torch.bincount(picks, minlength=VOCAB)
    assert counts[probs == 0].sum() == 0, "a filtered-out token was drawn"
    stat, df = chi2_stat(counts, probs, n)
    assert df >= 5
    assert stat < chi2_quantile(df, 4.75), (stat, df)
    # Power check: the model's unfiltered temperature-1 distribution differs; the draws must reject it
    # (for "plain" compare against a slightly hotter temperature instead).
    wrong = sampling_probs(logits, SamplingSettings(1.0) if settings != SamplingSettings(1.0)
                           else SamplingSettings(1.15))
    wrong_stat, wrong_df = chi2_stat(counts, wrong.clamp_min(1e-12), n)
    assert wrong_stat > chi2_quantile(wrong_df, 4.75), (wrong_stat, wrong_df)
