"""KV-cache bytes per step: measured from the real cache tensors vs the formula, which must agree exactly.

    formula = 2 (K and V) x layers x kv_heads x head_dim x tokens x batch x bytes_per_value

Runs prefill then greedy decode steps for a batch of copies of one prompt and checks every step.
"""
from __future__ import annotations

from engine.bench import Bench
from engine.core.kv import kv_bytes, kv_bytes_for, kv_tokens
from engine.core.loaded import LoadedModel
from engine.core.prompt import encode_prompt

# The loop (torch) is imported in measure_steps: ``bench kv --help`` needs neither.

# `--mode compiled`: the command says this in one line and runs eager (engine/__main__.py)
EAGER_BECAUSE = ("KV bytes are measured step by step on the eager loop's growing cache (a static cache holds its whole"
              " length from the first token)")

DEFAULT_PROMPT = "The key and value vectors of every earlier token are kept in the cache, so"


def add_arguments(p) -> None:
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--batch", type=int, default=1, help="copies of the prompt decoded together")


def measure_steps(lm: LoadedModel, ids: list[int], new_tokens: int, batch: int = 1) -> list[dict]:
    """One row per forward pass (step 0 = prefill): cached tokens, measured bytes, formula bytes."""
    import torch

    from engine.core.loop import decode_step, new_cache, prefill

    rows = []
    with torch.inference_mode():
        cache = new_cache(lm)
        x = torch.tensor([list(ids)] * batch, device=lm.device)  # [batch, n]
        for i in range(max(1, new_tokens)):
            logits = (prefill if i == 0 else decode_step)(lm, x, cache)  # [batch, vocab]
            t = kv_tokens(cache)
            measured, formula = kv_bytes(cache), kv_bytes_for(lm.info, t, batch)
            rows.append({"step": i, "phase": "prefill" if i == 0 else "decode", "tokens": t, "batch": batch,
                         "measured_bytes": measured, "formula_bytes": formula, "equal": measured == formula})
            x = logits.argmax(-1, keepdim=True)  # [batch, 1] greedy
    return rows


def run(lm: LoadedModel, args) -> dict:
    i = lm.info
    ids = list(encode_prompt(lm.tokenizer, args.prompt, use_chat_template=False).ids)
    batch = max(1, int(args.batch))
    rows = measure_steps(lm, ids, int(args.new_tokens), batch)
    per_token = kv_bytes_for(i, 1)
    return {
        "benchmark": "kv", "model": lm.name, "device": i.device, "dtype": i.dtype,
        "formula": (f"2 x {i.n_layers} layers x {i.n_kv_heads} kv_heads x {i.head_dim} head_dim x tokens x "
                    f"{batch} batch x {i.bytes_per_value} bytes"),
        "bytes_per_token": per_token, "prompt_tokens": len(ids), "batch": batch, "steps": rows,
        "all_equal": all(r["equal"] for r in rows),
    }


def summary(r: dict) -> str:
    lines = [f"{r['model']} ({r['dtype']}): {r['formula']} = {r['bytes_per_token']:,} bytes per token per sequence",
             f"{'step':>4} {'phase':<8} {'tokens':>6} {'measured':>12} {'formula':>12}  equal"]
    lines += [f"{s['step']:>4} {s['phase']:<8} {s['tokens']:>6} {s['measured_bytes']:>12,} {s['formula_bytes']:>12,}  "
              f"{'yes' if s['equal'] else 'NO'}" for s in r["steps"]]
    lines.append("all steps equal: " + ("yes" if r["all_equal"] else "NO"))
    return "\n".join(lines)


BENCH = Bench("kv", run, add_arguments, summary, eager_because=EAGER_BECAUSE)
