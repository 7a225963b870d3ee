"""Benchmark: speculative decoding vs the engine's plain decoding vs ``model.generate``, measured in one run.

For each prompt (extractive tasks that copy from a given passage, and open-ended ones) and each drafter and
draft length k: acceptance rate, tokens per target pass, measured c, wall-clock speedup over plain decoding,
and the same ratio for ``model.generate`` with its built-in equivalent (``prompt_lookup_num_tokens`` for
prompt lookup; ``assistant_early_exit`` for early exit). Greedy, chat template on, stop at end-of-turn.
Runs alternate (plain, speculative, generate, ...) so drift on a shared machine hits every side alike;
the figures that matter are ratios of medians measured in this one run.
"""
from __future__ import annotations

import statistics

from engine.bench import Bench
from engine.core.loaded import LoadedModel, ModelLoadError
from engine.core.prompt import encode_prompt
from engine.speculative import PROMPTS

# The decoding (torch, transformers) is imported by the functions that run it: ``bench specdec --help`` needs neither.

# `--mode compiled`: the command says this in one line and runs eager (engine/__main__.py)
EAGER_BECAUSE = ("speculative decoding's verify passes (k + 1 tokens) and their rollback run eager, and the plain runs"
              " beside them too, so the ratios compare like with like")


def add_arguments(p) -> None:
    p.add_argument("--new-tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--drafters", default="lookup,early-exit:8", help="comma-separated drafter specs")
    p.add_argument("--ks", default="4,8", help="comma-separated draft lengths")
    p.add_argument("--prompts", type=int, default=len(PROMPTS), help="use only the first N prompts")


def _wall_plain(lm, ids, n):
    from engine.core.sampling import SamplingSettings
    from engine.core.trace import generate_tokens
    from engine.measure.timing import now

    t0 = now(lm.device)
    out, *_ = generate_tokens(lm, ids, SamplingSettings(), n, seed=0, record=False)
    return now(lm.device) - t0, out


def _wall_spec(lm, ids, drafter, k, n):
    from engine.core.sampling import SamplingSettings
    from engine.measure.timing import now
    from engine.speculative.decoding import speculative_generate

    t0 = now(lm.device)
    out = speculative_generate(lm, ids, drafter, k, SamplingSettings(), n, seed=0).ids
    return now(lm.device) - t0, out


def _wall_generate(lm, ids, n, **assist):
    from transformers import GenerationConfig

    from engine.measure.timing import timed_generate

    cfg = GenerationConfig(max_new_tokens=n, do_sample=False, pad_token_id=lm.tokenizer.pad_token_id,
                           eos_token_id=lm.model.generation_config.eos_token_id or lm.tokenizer.eos_token_id, **assist)
    return timed_generate(lm, ids, cfg)


def _builtin(spec: str, k: int) -> dict | None:
    """model.generate's own equivalent of a drafter, if it has one."""
    kind, _, arg = spec.partition(":")
    if kind == "lookup":
        return {"prompt_lookup_num_tokens": k}
    if kind == "early-exit":
        return {"assistant_early_exit": int(arg), "num_assistant_tokens": k,
                "num_assistant_tokens_schedule": "constant"}
    return None


def run(lm: LoadedModel, args) -> dict:
    import torch

    from engine.core.loop import warm_up
    from engine.core.sampling import SamplingSettings
    from engine.speculative.decoding import race
    from engine.speculative.drafters import DrafterError, make_drafter

    n, repeats = args.new_tokens, max(1, args.repeats)
    specs = [s.strip() for s in args.drafters.split(",") if s.strip()]
    ks = [int(k) for k in args.ks.split(",") if k.strip()]
    warm_up(lm)
    drafters = {}
    for s in specs:
        try:
            drafters[s] = make_drafter(lm, s)
        except (DrafterError, ModelLoadError) as exc:
            drafters[s] = str(exc)
    rows = []
    for name, kind, prompt in PROMPTS[: max(1, args.prompts)]:
        ids = list(encode_prompt(lm.tokenizer, prompt, use_chat_template=True).ids)
        _wall_plain(lm, ids, 4)
        gen_plain = []
        for _ in range(repeats):
            gen_plain.append(_wall_generate(lm, ids, n)[0])
        for spec, d in drafters.items():
            if isinstance(d, str):
                rows.append({"prompt": name, "kind": kind, "drafter": spec, "error": d})
                continue
            for k in ks:
                rec = race(lm, ids, spec, k, SamplingSettings(), n, 0, drafter=d)  # counts: a, tokens/pass, c
                assist = _builtin(spec, k)
                plain_t, spec_t, gen_t = [], [], []
                assist_error = None
                for _ in range(repeats):
                    t, out_p = _wall_plain(lm, ids, n)
                    plain_t.append(t)
                    t, out_s = _wall_spec(lm, ids, d, k, n)
                    spec_t.append(t)
                    if assist is not None:
                        try:
                            t, out_g = _wall_generate(lm, ids, n, **assist)
                            gen_t.append(t)
                        except Exception as exc:  # an assistance mode this transformers version lacks
                            assist_error = f"{type(exc).__name__}: {str(exc)[:200]}"
                            assist = None
                tp, ts = statistics.median(plain_t), statistics.median(spec_t)
                row = {
                    "prompt": name, "kind": kind, "drafter": spec, "k": k, "prompt_tokens": len(ids),
                    "new_tokens": len(out_p), "acceptance_rate": rec.acceptance_rate,
                    "tokens_per_target_pass": rec.tokens_per_pass, "c": rec.c,
                    "expected_speedup": rec.predicted.paper,
                    "plain_tokens_per_s": len(out_p) / tp, "spec_tokens_per_s": len(out_s) / ts,
                    "speedup": (len(out_s) / ts) / (len(out_p) / tp),
                    "plain_seconds_spread": [min(plain_t), max(plain_t)],
                    "spec_seconds_spread": [min(spec_t), max(spec_t)],
                    "identical_output": out_s == out_p,
                }
                if gen_t:
                    tg = statistics.median(gen_t)
                    row["generate_assisted_tokens_per_s"] = len(out_g) / tg
                    row["generate_assisted_speedup"] = (len(out_g) / tg) / (len(out_p) / tp)
                    row["spec_vs_generate_assisted"] = (len(out_s) / ts) / (len(out_g) / tg)
                    row["generate_same_tokens"] = out_g == out_p
                if assist_error:
                    row["generate_assisted_error"] = assist_error
                row["generate_plain_tokens_per_s"] = len(out_p) / statistics.median(gen_plain)
                rows.append(row)
    ok = [r for r in rows if "error" not in r]
    best = {}
    for kind in ("extractive", "open"):
        by_cfg = {}
        for r in ok:
            if r["kind"] == kind:
                by_cfg.setdefault((r["drafter"], r["k"]), []).append(r)
        if by_cfg:
            cfg, rs = max(by_cfg.items(), key=lambda kv: statistics.median(x["speedup"] for x in kv[1]))
            b = {"drafter": cfg[0], "k": cfg[1], "median_speedup": statistics.median(x["speedup"] for x in rs),
                 "all_identical": all(x["identical_output"] for x in rs)}
            if all("spec_vs_generate_assisted" in x for x in rs):
                b["median_generate_assisted_speedup"] = statistics.median(x["generate_assisted_speedup"] for x in rs)
                b["median_spec_vs_generate_assisted"] = statistics.median(x["spec_vs_generate_assisted"] for x in rs)
            best[kind] = b
    return {
        "benchmark": "specdec", "model": lm.name, "device": lm.info.device, "dtype": lm.info.dtype,
        "threads": torch.get_num_threads(), "new_tokens": n, "repeats": repeats, "rows": rows, "best": best,
        "note": "greedy, chat template on, stops at end-of-turn; speedup = speculative tokens/s over the engine's "
                "plain tokens/s (medians of alternating repeats, one run); generate_assisted_* is model.generate "
                "with its built-in equivalent (prompt_lookup_num_tokens / assistant_early_exit), same k",
    }


def summary(r: dict) -> str:
    lines = [f"{r['model']} on {r['device']} ({r['threads']} threads), {r['new_tokens']} new tokens, "
             f"median of {r['repeats']}"]
    for x in r["rows"]:
        if "error" in x:
            lines.append(f"  {x['prompt']:<10} {x['drafter']:<14} error: {x['error']}")
            continue
        g = f"  generate-assisted x{x['generate_assisted_speedup']:.2f}" if "generate_assisted_speedup" in x else ""
        lines.append(f"  {x['prompt']:<10} {x['drafter']:<14} k={x['k']:<2} a={x['acceptance_rate']:.2f} "
                     f"tok/pass={x['tokens_per_target_pass']:.2f} c={x['c']:.3f} speedup x{x['speedup']:.2f} "
                     f"(expected x{x['expected_speedup']:.2f}){g} identical={x['identical_output']}")
    for kind, b in r["best"].items():
        extra = (f", generate-assisted x{b['median_generate_assisted_speedup']:.2f}"
                 if "median_generate_assisted_speedup" in b else "")
        lines.append(f"best on {kind}: {b['drafter']} k={b['k']} median speedup x{b['median_speedup']:.2f}{extra}")
    return "\n".join(lines)


BENCH = Bench("specdec", run, add_arguments, summary, eager_because=EAGER_BECAUSE)
