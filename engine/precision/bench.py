"""Benchmark: the same model at every precision this device supports, in one run (alternating, medians).

With ``--mode compiled`` every precision's copy runs compiled where it can (a row's ``mode`` says which ran).

Keys of the result: benchmark, model, device, threads, small_pass_rows (passes of at most this many rows, such
as a decode step, run on one thread: engine/measure/threads.py), prompt_tokens, new_tokens, repeats (at least
LESSON_RUNS = 5, after a warm-up: a speedup is a lesson's sentence), repeats_asked, read_gb_s,
text_positions, reference, rows: [{precision, dtype, decode_weight_bytes, floor_ms, prefill_ms, decode_ms
(timings as {"median", "min", "max", "n"}), decode_tokens_per_s, speedup_vs_float32, prefill_speedup_vs_float32,
tokens_identical (greedy tokens equal to float32 from the start), new_tokens, top1_agreement, mean_kl, max_kl,
text, flags (why its speedup is no lesson: too few repeats, or two more than 1.5x apart; empty when it is one)}], llama_cpp: {...} or {"skipped": why}, note.
Compare ratios (speedups), not absolute times: the machine may be shared.
"""
from __future__ import annotations

import importlib.util
import os
import statistics
import time

from engine.bench import Bench
from engine.models.names import EMBEDDED
from engine.models import catalog
from engine.core.loaded import DEFAULT_MODE, PRECISIONS, LoadedModel
from engine.core.prompt import encode_prompt
from engine.measure.spread import LESSON_RUNS
from engine.measure.threads import small_pass_rows, threads_said
from engine.precision import PROMPT

# The measurement (torch, transformers) is imported when the benchmark runs: ``bench precision --help`` needs neither.


def add_arguments(p) -> None:
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=LESSON_RUNS, help=f"alternating repeats (at least {LESSON_RUNS})")
    p.add_argument("--precisions", default="", help=f"comma-separated, from {','.join(PRECISIONS)} "
                                                    "(default: all this device supports)")
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--no-llama-cpp", action="store_true", help="skip the llama.cpp reference row")


def _llama_cpp(lm: LoadedModel, ids: list[int], new_tokens: int, repeats: int) -> dict:
    """llama.cpp on the embedded GGUF (its own Q4_1 weights), 2 threads: the native reference. Timed from its
    own per-token callbacks is not possible through the Python API, so: prefill = time to evaluate the prompt,
    decode = (time of prompt + n tokens - prefill) / (n - 1)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return {"skipped": "llama-cpp-python is not installed (pip install llama-cpp-python)"}
    from engine.models import packaged

    gguf = packaged.gguf_path(catalog.row(EMBEDDED))
    if lm.ref.name != EMBEDDED or gguf is None:
        return {"skipped": "the llama.cpp row runs only on the embedded model (its GGUF file)"}
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), n_threads=2, n_threads_batch=2, n_ctx=512, verbose=False,
                seed=0)
    # the same prompt token ids as the torch rows (the converted tokenizer has the GGUF's vocabulary)

    def once(n, steps):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        t_pre = time.perf_counter() - t0
        out = []
        for _ in range(n):
            tok = llm.sample(temp=0.0)
            out.append(tok)
            t1 = time.perf_counter()
            llm.eval([tok])
            if len(out) > 1:
                steps.append(time.perf_counter() - t1)
        return t_pre, out

    once(2, [])
    pre, dec = [], []
    for _ in range(repeats):
        steps: list[float] = []
        t_pre, out = once(new_tokens, steps)
        pre.append(t_pre * 1000.0)
        dec.append(statistics.median(steps) * 1000.0)
    return {"weights": "Q4_1 GGUF (4-bit blocks + scales)", "threads": 2,
            "prefill_ms": {"median": statistics.median(pre), "min": min(pre), "max": max(pre), "n": len(pre)},
            "decode_ms": {"median": statistics.median(dec), "min": min(dec), "max": max(dec), "n": len(dec)},
            "decode_tokens_per_s": 1000.0 / statistics.median(dec),
            "text": llm.detokenize(out).decode(errors="replace"),
            "note": "own tokenizer path and prompt handling; timed with perf_counter around llm.eval"}


def run(lm: LoadedModel, args) -> dict:
    from engine.core.compiled import ModeError, mode_of, to_mode
    from engine.models.precision import supported, to_precision
    from engine.precision import experiment as P
    from engine.timeline.experiment import spread_dict
    from engine.timeline.roofline import hardware_probe

    want = [p.strip() for p in str(args.precisions).split(",") if p.strip()] or list(supported(lm.device))
    bad = [p for p in want if p not in supported(lm.device)]
    if bad:
        raise SystemExit(f"error: not supported here: {', '.join(bad)} (supported: {', '.join(supported(lm.device))})")
    want = ["float32"] + [p for p in want if p != "float32"]
    mode = mode_of(lm)  # --mode compiled: every precision's copy compiled too, where that precision can be
    models, modes = [], {}
    for p in want:
        m = to_precision(to_mode(lm, DEFAULT_MODE), p)
        try:
            m = to_mode(m, mode)
        except ModeError as exc:
            modes[p] = f"eager ({exc})"
        models.append(m)
        modes.setdefault(p, mode_of(m))
    ids = list(encode_prompt(lm.tokenizer, args.prompt, use_chat_template=True).ids)
    hw = hardware_probe(lm.device)
    repeats = max(LESSON_RUNS, int(args.repeats))  # fewer would make a noisy pair into a speedup (0.53x from 2)
    cmp = P.compare_precisions(models, ids, args.new_tokens, repeats, hw.read_gb_s.median)
    rows = [{
        "precision": r.precision, "mode": modes[r.precision], "dtype": r.dtype,
        "decode_weight_bytes": r.decode_weight_bytes,
        "floor_ms": round(r.floor_ms, 3), "prefill_ms": spread_dict(r.prefill_ms), "decode_ms": spread_dict(r.decode_ms),
        "decode_tokens_per_s": round(r.decode_tokens_per_s, 2),
        "speedup_vs_float32": round(cmp.speedup(r.precision), 3),
        "prefill_speedup_vs_float32": round(cmp.prefill_speedup(r.precision), 3),
        "tokens_identical": r.same_tokens, "new_tokens": cmp.new_tokens,
        "top1_agreement": round(r.agreement.top1, 4), "mean_kl": round(r.agreement.mean_kl, 6),
        "max_kl": round(r.agreement.max_kl, 6), "text": r.text, "flags": list(cmp.speedup_flags(r.precision)),
    } for r in cmp.rows]
    llama = {"skipped": "--no-llama-cpp"} if args.no_llama_cpp else _llama_cpp(lm, ids, args.new_tokens, repeats)
    return {
        "benchmark": "precision", "model": lm.ref.name, "device": lm.info.device, "threads": cmp.threads,
        "small_pass_rows": small_pass_rows() if lm.device.type == "cpu" else 0, "cpu_count": os.cpu_count(),
        "prompt_tokens": cmp.prompt_tokens, "new_tokens": cmp.new_tokens,
        "repeats": cmp.repeats, "repeats_asked": int(args.repeats), "read_gb_s": round(hw.read_gb_s.median, 2), "text_positions": cmp.text_positions,
        "reference": cmp.reference, "rows": rows, "llama_cpp": llama,
        "note": "measured: prefill and decode times (alternating precisions each repeat, medians), bandwidth, "
                "agreement; derived: weight bytes from the stored tensors, floor = bytes / read bandwidth, "
                "speedups = ratios of medians in this one run; tokens_identical counts greedy tokens equal to "
                "float32 from the start; KL(p_float32 || p) in nats over every position of a fixed text",
    }


def summary(r: dict) -> str:
    lines = [f"{r['model']} on {r['device']}, {threads_said(r['threads'], r.get('small_pass_rows', 0))}, "
             f"{r['new_tokens']} tokens x {r['repeats']} "
             f"repeats, bandwidth {r['read_gb_s']:.1f} GB/s",
             f"{'precision':>9} {'MB/step':>8} {'floor ms':>8} {'decode ms':>9} {'tok/s':>7} {'speedup':>7} "
             f"{'prefill ms':>10} {'same tok':>8} {'top-1':>6} {'KL':>8}"]
    for x in r["rows"]:
        lines.append(f"{x['precision']:>9} {x['decode_weight_bytes'] / 1e6:>8.0f} {x['floor_ms']:>8.1f} "
                     f"{x['decode_ms']['median']:>9.1f} {x['decode_tokens_per_s']:>7.1f} {x['speedup_vs_float32']:>6.2f}x "
                     f"{x['prefill_ms']['median']:>10.1f} {x['tokens_identical']:>3}/{x['new_tokens']:<4} "
                     f"{x['top1_agreement']:>6.1%} {x['mean_kl']:>8.4f}")
    lines += [f"  noise: {f}" for f in dict.fromkeys(f for x in r["rows"] for f in x.get("flags", []))]
    ll = r["llama_cpp"]
    if "skipped" in ll:
        lines.append(f"llama.cpp: skipped ({ll['skipped']})")
    else:
        lines.append(f"llama.cpp ({ll['weights']}, {ll['threads']} threads): decode {ll['decode_ms']['median']:.1f} ms "
                     f"({ll['decode_tokens_per_s']:.1f} tok/s), prefill {ll['prefill_ms']['median']:.1f} ms")
    return "\n".join(lines)


BENCH = Bench("precision", run, add_arguments, summary)
