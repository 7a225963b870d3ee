"""SmoothQuant folding (engine/models/smoothing.py): exact in float, balanced as its formula says, skipped where the
layout is not the one it knows."""
import copy

import torch

from engine.models import smoothing


def _logits(lm_model, ids):
    with torch.inference_mode():
        return lm_model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]  # [n, vocab]


def test_smoothing_changes_weights_but_not_what_the_model_computes(tiny_lm):
    model = copy.deepcopy(tiny_lm.model)
    ids = smoothing.calibration_ids(tiny_lm.tokenizer)[:40]
    before = _logits(model, ids)
    norm0 = model.model.layers[0].input_layernorm.weight.clone()
    assert smoothing.smooth(model, ids)
    assert not torch.allclose(model.model.layers[0].input_layernorm.weight, norm0)  # it did something
    torch.testing.assert_close(_logits(model, ids), before, rtol=1e-4, atol=1e-4)  # ... and nothing changed
    # the shared model is not touched
    torch.testing.assert_close(tiny_lm.model.model.layers[0].input_layernorm.weight,
                               norm0)


def test_at_alpha_one_half_each_input_channel_peaks_where_its_weights_do(tiny_lm):
    """s_j = sqrt(max|x_j| / max|W_:,j|): afterwards max|x'_j| = max|x_j| / s_j equals max|W'_:,j| = max|W_:,j| s_j."""
    model = copy.deepcopy(tiny_lm.model)
    ids = smoothing.calibration_ids(tiny_lm.tokenizer)
    assert smoothing.smooth(model, ids, alpha=0.5)
    groups = smoothing._groups(model)
    after = smoothing._input_max(model, groups, ids)
    for (_, lins), a in zip(groups, after):
        w = torch.stack([m.weight.abs().amax(0) for m in lins]).amax(0)
        torch.testing.assert_close(a, w, rtol=1e-3, atol=1e-5)


def test_an_unknown_layout_is_left_alone(tiny_lm):
    model = copy.deepcopy(tiny_lm.model)
    model.config.model_type = "gemma"  # its norms multiply by (1 + weight): folding would be wrong
    before = [p.clone() for p in model.parameters()]
    assert smoothing._groups(model) is None
    assert not smoothing.smooth(model, [1, 2, 3])
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
