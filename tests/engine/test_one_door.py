"""Every forward pass of the engine goes through engine.core.loop (``forward`` with a cache, ``full_pass``
without): a hook counts the passes of the model that did not, while the engine paths the pages use run on the
tiny model. (tests/app/test_one_door.py does the same for every page's own run.)"""
import torch

from engine.core import loop


def _engine_paths(lm):
    from engine.attention.analysis import measure_cost, window_view
    from engine.attention.lens import logit_lens
    from engine.core.prompt import encode_prompt
    from engine.core.sampling import SamplingSettings
    from engine.models.smoothing import calibration_ids, smooth
    from engine.core.trace import run_trace
    from engine.loop.glance import last_position
    from engine.loop.inspect import block_walk
    from engine.sampling.positions import position_predictions
    from engine.timeline import experiment as T
    from engine.timeline import memory as M

    ids = list(encode_prompt(lm.tokenizer, "What is the capital of France?", True).ids)
    yield "trace", lambda: run_trace(lm, "What is the capital of France?", SamplingSettings(), max_new_tokens=3)
    yield "glance", lambda: last_position(lm, ids)
    yield "block walk", lambda: block_walk(lm, ids, 0)
    yield "positions", lambda: position_predictions(lm, ids)
    yield "lens", lambda: logit_lens(lm, ids)
    yield "attention cost", lambda: measure_cost(lm, (8, 16), repeats=1)
    yield "window view (tiny Gemma 3)", lambda: window_view(_gemma(), list(range(3, 40)))
    yield "cache comparison", lambda: T.cache_comparison(lm, ids, new_tokens=3)
    yield "memory", lambda: M.training_vs_inference_memory(lm, ids)
    yield "smoothing calibration", lambda: smooth(_copy(lm.model), calibration_ids(lm.tokenizer)[:16])


def _gemma():
    from engine.models.loading import load_tiny_arch

    return load_tiny_arch("gemma3")


def _copy(model):
    import copy

    return copy.deepcopy(model)


def test_every_engine_pass_goes_through_the_loop(tiny_lm, door):
    for name, run in _engine_paths(tiny_lm):
        before = door["through"]
        run()
        assert door["outside"] == 0, (name, door["where"][:1])
        assert door["through"] > before, name


def test_the_counter_sees_a_pass_made_elsewhere(tiny_lm, door):
    with torch.inference_mode():
        tiny_lm.model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=False)
        loop.full_pass(tiny_lm, torch.tensor([[1, 2, 3]]))
    assert door["outside"] == 1 and door["through"] == 1
