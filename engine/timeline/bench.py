"""Benchmark: prefill vs decode on this machine. Prints the prompt-length sweep (TTFT and TPOT), the stage
breakdown of a prefill and a decode pass, and the decode step against its memory-bandwidth floor.

Keys of the result (times in ms, every timing as {"median", "min", "max", "n"} over repeats):
  benchmark, model, device, dtype, threads, new_tokens, repeats,
  sweep: [{prompt_tokens, ttft_ms, tpot_ms}], ttft_growth, tpot_growth (longest / shortest prompt, medians),
  extended (lengths added, doubling, until prefill climbed: TTFT >= CLIMB x the shortest's), climb_started_at (the
  first length past STARTED x the shortest's TTFT, or null), memory_short_at (a length the device could not hold),
  breakdown: {prefill, decode: {tokens_in, stage_ms: {stage: timing}, shares: {stage: fraction}, hooked_total_ms,
              plain_total_ms, hook_overhead}},
  hardware: {read_gb_s, copy_gb_s, matmul_gflop_s (in matmul_dtype, the model's)}, decode_weight_bytes,
  floor_check: {step_ms, read_gb_s, floor_ms, probe_mb, flags}: a decode step and the bandwidth probe measured
  alternately (engine.timeline.experiment.floor_beside_step), decode_floor_ms, decode_step_ms (their medians),
  bandwidth_utilisation (floor / decode step: above 1 the step read faster than the probe), note.
The ratios (growth, shares, utilisation) are what to compare across machines: absolute times on a shared
machine are noisy.
"""
from __future__ import annotations

from engine.bench import Bench
from engine.core.loaded import LoadedModel
from engine.core.prompt import encode_prompt
from engine.timeline import PROMPT, SWEEP_LENGTHS

# The experiment (torch) is imported when the benchmark runs: ``bench timeline --help`` needs no torch.


def add_arguments(p) -> None:
    p.add_argument("--lengths", default=",".join(map(str, SWEEP_LENGTHS)), help="prompt lengths, comma-separated")
    p.add_argument("--new-tokens", type=int, default=8, help="tokens generated per sweep run (>= 2)")
    p.add_argument("--no-extend", action="store_true", help="measure only --lengths (by default the sweep doubles "
                                                             "the longest prompt until prefill climbs)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--breakdown-repeats", type=int, default=3)
    p.add_argument("--probe-mb", type=int, default=256, help="buffer size of the bandwidth probe (MiB)")
    p.add_argument("--prompt", default=PROMPT, help="prompt of the stage breakdown (chat template applied)")


def _pass(p) -> dict:
    """A stage breakdown's pass (engine.timeline.experiment.PassBreakdown) as JSON."""
    from engine.timeline import experiment as T

    return {
        "tokens_in": p.tokens_in,
        "stage_ms": {s: T.spread_dict(v) for s, v in p.stage_ms.items()},
        "shares": {s: round(v, 4) for s, v in p.shares().items()},
        "hooked_total_ms": T.spread_dict(p.hooked_total_ms), "plain_total_ms": T.spread_dict(p.plain_total_ms),
        "hook_overhead": round(p.hook_overhead, 4),
    }


def run(lm: LoadedModel, args) -> dict:
    from engine.core.sampling import SamplingSettings
    from engine.timeline import experiment as T
    from engine.timeline import roofline as R

    lengths = [int(x) for x in str(args.lengths).split(",") if x.strip()]
    T.warm_sweep(lm, lengths, args.new_tokens)  # compiled mode: the prefill buckets, before anything is timed
    sw = T.prompt_length_sweep(lm, lengths, args.new_tokens, args.repeats)
    extended, short = [], None
    while not args.no_extend and not T.climbed(sw.rows):  # on a fast device: until prefill really climbs
        n = T.next_length(sw.rows, lm.info.max_positions, sw.new_tokens)
        if n:
            T.warm_sweep(lm, [n], sw.new_tokens)
        row = T.sweep_length(lm, n, sw.new_tokens, sw.repeats) if n else None
        if row is None:
            short = n
            break
        extended.append(n)
        sw = T.Sweep(sw.rows + (row,), sw.new_tokens, sw.repeats)
    ids = list(encode_prompt(lm.tokenizer, args.prompt, use_chat_template=True).ids)
    bd = T.stage_breakdown(lm, ids, args.breakdown_repeats, SamplingSettings(0.7, 50, 0.95))
    hw = R.hardware_probe(lm.device, buffer_mb=args.probe_mb, matmul_dtype=lm.info.dtype)
    fc = R.floor_beside_step(lm, ids)
    floor, step = fc.floor_ms.median, fc.step_ms.median
    first, last = sw.rows[0], sw.rows[-1]
    return {
        "benchmark": "timeline", "model": lm.name, "device": lm.info.device, "dtype": lm.info.dtype,
        "threads": hw.threads, "new_tokens": sw.new_tokens, "repeats": sw.repeats,
        "sweep": [{"prompt_tokens": r.prompt_tokens, "ttft_ms": T.spread_dict(r.ttft_ms),
                   "tpot_ms": T.spread_dict(r.tpot_ms), "prefill_mode": r.prefill_mode,
                   "prefill": r.prefill} for r in sw.rows],
        "ttft_growth": round(last.ttft_ms.median / first.ttft_ms.median, 3),
        "extended": extended, "climb_started_at": T.climb_start(sw.rows), "memory_short_at": short,
        "tpot_growth": round(last.tpot_ms.median / first.tpot_ms.median, 3),
        "breakdown": {"prefill": _pass(bd.prefill), "decode": _pass(bd.decode)},
        "hardware": {"read_gb_s": T.spread_dict(hw.read_gb_s), "copy_gb_s": T.spread_dict(hw.copy_gb_s),
                     "matmul_gflop_s": T.spread_dict(hw.matmul_gflop_s), "matmul_dtype": hw.matmul_dtype},
        "floor_check": {"step_ms": T.spread_dict(fc.step_ms), "read_gb_s": T.spread_dict(fc.read_gb_s),
                        "floor_ms": T.spread_dict(fc.floor_ms), "probe_mb": round(fc.probe_mb, 1),
                        "flags": list(fc.flags)},
        "decode_weight_bytes": R.decode_weight_bytes(lm), "decode_floor_ms": round(floor, 3),
        "decode_step_ms": round(step, 3), "bandwidth_utilisation": round(floor / step, 4),
        "note": "measured: sweep, stage times, bandwidth, matmul; the decode step and its bandwidth probe "
                "alternately, after a warm-up; derived: floor = weight bytes / read bandwidth, utilisation = floor / "
                "median decode step (the forward pass); growth = longest / shortest prompt; shared machine: compare "
                "ratios, not absolute times",
    }


def summary(r: dict) -> str:
    lines = [f"{'prompt tokens':>13} {'TTFT ms':>10} {'TPOT ms':>10}  prefill"]
    for row in r["sweep"]:
        lines.append(f"{row['prompt_tokens']:>13} {row['ttft_ms']['median']:>10.1f} {row['tpot_ms']['median']:>10.1f}"
                     f"  {row.get('prefill', '')}")
    lines.append(f"TTFT grows x{r['ttft_growth']:.2f}, TPOT x{r['tpot_growth']:.2f} from shortest to longest prompt"
                 + (f"; prefill started to climb at {r['climb_started_at']} tokens" if r["climb_started_at"] else "")
                 + (f"; extended to {r['extended'][-1]} tokens" if r["extended"] else "")
                 + (f"; {r['memory_short_at']} tokens did not fit in memory" if r["memory_short_at"] else ""))
    for phase in ("prefill", "decode"):
        shares = r["breakdown"][phase]["shares"]
        lines.append(f"{phase:>7}: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))
    fc = r["floor_check"]
    lines.append(f"decode step {r['decode_step_ms']:.2f} ms vs floor {r['decode_floor_ms']:.2f} ms "
                 f"({fc['read_gb_s']['median']:.1f} GB/s measured beside it, {fc['step_ms']['n']} rounds): "
                 f"utilisation {r['bandwidth_utilisation']:.0%}")
    lines += [f"  noise: {f}" for f in fc["flags"]]
    return "\n".join(lines)


BENCH = Bench("timeline", run, add_arguments, summary)
