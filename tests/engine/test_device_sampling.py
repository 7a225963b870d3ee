"""The device sampler (engine.core.device_sampling) draws the token the engine's sampler draws, seed for seed, over a
grid of settings (float32, CPU), and leaves the generator where the engine's sampler leaves it, so a run that mixes
the two (the first token sampled on the host after prefill, the rest in the compiled step) stays on one stream.
Here it runs eagerly; a compiled run's tokens against eager's are in test_compiled.py."""
import itertools

import pytest
import torch

from engine.core import device_sampling as D
from engine.core.sampling import SamplingSettings, make_generator, sample

pytestmark = pytest.mark.usefixtures("one_thread")
GRID = [SamplingSettings(t, k, p, m) for t, k, p, m in itertools.product(
    (0.0, 0.3, 1.0, 1.7), (0, 1, 7, 300, 1000), (1.0, 0.95, 0.6, 0.1), (0.0, 0.02, 0.4))]
VOCAB = 300


def _logits(i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + i)
    return torch.randn(VOCAB, generator=g) * (1 + i % 4)  # [V]: flat and peaked rows


def _device(logits, s, gen):
    q = D.noise((1, VOCAB), gen, "cpu") if not s.greedy else torch.ones(1, VOCAB)
    return int(D.draw(logits[None], D.knobs(s, "cpu"), q)[0])


def test_the_device_draw_equals_the_engine_sampler_seed_for_seed_over_a_grid_of_settings():
    differs_from_argmax = 0
    for i, s in enumerate(GRID):
        for seed in range(3):
            logits = _logits(3 * i + seed)
            g_host, g_dev = make_generator(seed), make_generator(seed)
            want = int(sample(logits, s, g_host))
            assert _device(logits, s, g_dev) == want, (s, seed)
            assert torch.equal(g_host.get_state(), g_dev.get_state()), (s, seed)  # the same numbers consumed
            differs_from_argmax += want != int(logits.argmax())
    # power: the grid really samples (a draw that always took the argmax would pass the equality above for greedy
    # and top-k 1 rows only)
    assert differs_from_argmax > len(GRID) // 2


def test_the_filters_equal_the_engine_sampler_filters():
    from engine.core.sampling import filter_logits

    for i, s in enumerate(GRID):
        if s.greedy:
            continue
        logits = _logits(i)
        assert torch.equal(D.filtered(logits[None], D.knobs(s, "cpu"))[0], filter_logits(logits, s)), s


def test_top_p_takes_one_minus_p_as_the_engine_sampler_does():
    """1 - p in float32 is not float32(1 - p) for p = 0.9: the threshold is taken in double, as the engine's is."""
    assert float(1.0 - torch.tensor(0.9)) != float(torch.tensor(1.0 - 0.9))
    assert float(D.knobs(SamplingSettings(1.0, 0, 0.9, 0.0), "cpu")[2]) == float(torch.tensor(1.0 - 0.9))
