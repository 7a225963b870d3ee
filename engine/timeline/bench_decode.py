"""Benchmark: the engine's greedy decode loop vs ``model.generate`` on the same model and prompts.

Both produce the same number of tokens (end-of-sequence ignored), greedy, with a KV cache. Runs alternate
(engine, generate, engine, ...) after a warm-up, so slow drift of a shared machine hits both alike; the
figure that matters is the ratio of tokens/s measured in this one run.
"""
from __future__ import annotations

import statistics

import torch
from transformers import GenerationConfig

from engine.core.models import LoadedModel
from engine.core.prompt import encode_prompt
from engine.core.sampling import SamplingSettings
from engine.measure.threads import rule_for_every_pass
from engine.measure.timing import now
from engine.core.trace import generate_tokens
from engine.core.loop import warm_up

PROMPTS = [
    "The capital of France is",
    "Explain in two sentences why the sky is blue.",
    "Write a short Python function that reverses a string.",
]


def add_arguments(p) -> None:
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)


def _time_engine(lm, ids, n, record):
    t0 = now(lm.device)
    out, *_ = generate_tokens(lm, ids, SamplingSettings(), n, seed=0, stop_at_eos=False, record=record)
    return now(lm.device) - t0, out


@torch.inference_mode()
def _time_generate(lm, ids, n):
    # generate() fills fields left as None from the model's own generation_config (so EOS would come back); an
    # empty EOS list is "set" and stops nothing, and the shared model's generation_config is never edited.
    # min_new_tokens is not used because it masks EOS out of the argmax (changing tokens).
    cfg = GenerationConfig(max_new_tokens=n, do_sample=False, pad_token_id=lm.tokenizer.pad_token_id, eos_token_id=[])
    x = torch.tensor([ids], device=lm.device)
    t0 = now(lm.device)
    with rule_for_every_pass(lm.model):  # the engine's thread rule for small passes, as in engine.core.loop
        out = lm.model.generate(x, generation_config=cfg, attention_mask=torch.ones_like(x))
    seconds = now(lm.device) - t0
    out = out[0, len(ids):].tolist()
    assert len(out) == n, f"generate produced {len(out)} tokens, expected {n}"
    return seconds, out


def run(lm: LoadedModel, args) -> dict:
    n, repeats = args.new_tokens, args.repeats
    warm_up(lm)
    rows = []
    for prompt in PROMPTS:
        ids = list(encode_prompt(lm.tokenizer, prompt, use_chat_template=False).ids)
        _time_engine(lm, ids, 4, True), _time_generate(lm, ids, 4)  # per-prompt warm-up
        eng, gen, rec = [], [], []
        for _ in range(repeats):
            t, out_e = _time_engine(lm, ids, n, record=False)
            eng.append(t)
            t, out_r = _time_engine(lm, ids, n, record=True)
            rec.append(t)
            t, out_g = _time_generate(lm, ids, n)
            gen.append(t)
        rows.append({
            "prompt": prompt, "prompt_tokens": len(ids), "new_tokens": n,
            "engine_tokens_per_s": n / statistics.median(eng),
            "engine_instrumented_tokens_per_s": n / statistics.median(rec),
            "generate_tokens_per_s": n / statistics.median(gen),
            "same_tokens": out_e == out_g == out_r,
        })
    tot = lambda key: sum(r["new_tokens"] for r in rows) / sum(r["new_tokens"] / r[key] for r in rows)  # noqa: E731
    eng, inst, gen = tot("engine_tokens_per_s"), tot("engine_instrumented_tokens_per_s"), tot("generate_tokens_per_s")
    return {
        "benchmark": "decode", "model": lm.info.name, "device": lm.info.device, "dtype": lm.info.dtype,
        "threads": torch.get_num_threads(), "prompts": rows,
        "engine_tokens_per_s": eng, "engine_instrumented_tokens_per_s": inst, "generate_tokens_per_s": gen,
        "ratio_engine_vs_generate": eng / gen, "ratio_instrumented_vs_generate": inst / gen,
        "note": "greedy, KV cache on, EOS ignored; medians of repeats, alternating runs; ratio >= 1 means the "
                "engine is at least as fast as model.generate",
    }


def summary(r: dict) -> str:
    return (f"engine {r['engine_tokens_per_s']:.1f} tok/s (instrumented {r['engine_instrumented_tokens_per_s']:.1f}), "
            f"generate {r['generate_tokens_per_s']:.1f} tok/s, ratio {r['ratio_engine_vs_generate']:.2f} "
            f"(instrumented {r['ratio_instrumented_vs_generate']:.2f})")
