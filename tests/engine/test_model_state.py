"""The shared model is never changed by a request: after every page's engine work and every experiment, its
attention implementation, requires_grad flags, generation_config, hooks and attributes are as right after loading.
Everything runs through the engine worker, as in the app."""
from __future__ import annotations

import pytest
import torch

from engine.jobs import worker


def model_state(model) -> dict:
    hooks = {}
    for name, mod in model.named_modules():
        for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_forward_hooks_with_kwargs"):
            d = getattr(mod, kind, {})
            if d:
                hooks[(name, kind)] = tuple(sorted(d.keys()))
    return {
        "attn": model.config._attn_implementation,
        "requires_grad": tuple(p.requires_grad for p in model.parameters()),
        "generation_config": model.generation_config.to_dict(),
        "config": model.config.to_dict(),
        "hooks": hooks,
        "dict_keys": tuple(sorted(model.__dict__)),
        "training": model.training,
    }


def _jobs():
    from engine.batching import experiment as B
    from engine.batching.workload import WorkloadSettings, make_workload
    from engine.timeline import experiment as T
    from engine.timeline import memory as M
    from engine.speculative.decoding import race, sweep_k
    from engine.sampling.stepper import Stepper
    from engine.core.sampling import SamplingSettings
    from engine.embeddings import analysis as E
    from engine.attention.analysis import measure_forward
    from engine.loop.inspect import block_walk
    from engine.kv_cache.snapshot import cache_snapshot
    from engine.attention.lens import logit_lens
    from engine.sampling.positions import position_predictions
    from engine.core.trace import run_trace
    from engine.timeline import bench_decode

    ids = list(range(5, 25))

    def stepper(lm):
        s = Stepper(ids)
        s.append(lm, 7)
        s.append(lm, 8)
        s.restart(1)
        return s.step

    return {
        "trace": lambda lm: run_trace(lm, "Hello there", max_new_tokens=4),
        "sampled trace": lambda lm: run_trace(lm, "Hi", SamplingSettings(0.8, 20, 0.9), max_new_tokens=3, seed=2),
        "lens": lambda lm: logit_lens(lm, ids),
        "positions": lambda lm: position_predictions(lm, ids),
        "block walk": lambda lm: block_walk(lm, ids, 0),
        "attention cost": lambda lm: measure_forward(lm, 16, repeats=1),
        "kv snapshot": lambda lm: cache_snapshot(lm, ids, [3, 4, 5]),
        "stepper": stepper,
        "race early-exit": lambda lm: race(lm, ids, "early-exit:1", 3, max_new_tokens=6),
        "race self": lambda lm: race(lm, ids, "model:self", 2, SamplingSettings(0.9), max_new_tokens=5, seed=1),
        "sweep": lambda lm: sweep_k(lm, ids, "lookup", (1, 2), max_new_tokens=5),
        "timeline sweep": lambda lm: T.prompt_length_sweep(lm, (8,), 3, 1),
        "cache comparison": lambda lm: T.cache_comparison(lm, ids, 3),
        "stage breakdown": lambda lm: T.stage_breakdown(lm, ids, 1),
        "training memory": lambda lm: M.training_vs_inference_memory(lm, ids[:8]),
        "batching sweep": lambda lm: B.decode_sweep(lm, (1, 2), steps=2, warmup=1),
        "batching serve": lambda lm: B.serve(lm, make_workload(lm.tokenizer, WorkloadSettings(
            n_requests=3, min_new_tokens=2, max_new_tokens=3)), "continuous", 2, 0.0),
        "embeddings": lambda lm: (E.prompt_embeddings(lm, ids), E.nearest_tokens(lm, 5, 3), E.tied_check(lm)),
        "bench generate": lambda lm: bench_decode._time_generate(lm, ids, 3),
    }


@pytest.mark.parametrize("job", list(_jobs()))
def test_model_state_unchanged(tiny_lm, job):
    before = model_state(tiny_lm.model)
    worker.run(_jobs()[job], tiny_lm)
    assert model_state(tiny_lm.model) == before


def test_attention_capture_matches_eager(tiny_lm):
    """The load-time measuring attention returns the same weights as transformers' eager attention."""
    from engine.core.trace import analyse_prompt

    ids = list(range(5, 20))
    a = analyse_prompt(tiny_lm, ids)
    import copy

    eager = copy.deepcopy(tiny_lm.model)
    eager.set_attn_implementation("eager")
    with torch.inference_mode():
        ref = eager(input_ids=torch.tensor([ids]), use_cache=False, output_attentions=True).attentions
    got = torch.from_numpy(a.attentions.astype("float32"))
    want = torch.stack([t[0] for t in ref]).float()
    torch.testing.assert_close(got, want, atol=2e-3, rtol=0)
