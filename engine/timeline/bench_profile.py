"""Benchmark: one prefill and one decode step traced with torch.profiler, in each engine mode, side by side.

Keys of the result: benchmark, model, device, dtype, prompt_tokens, floor_ms (derived: weight bytes one decode
step reads / measured read bandwidth), matmul_dtype (the model's dtype: the matmul of the ridge),
ridge_flop_per_byte (derived: measured matmul FLOP/s / read bandwidth), modes: {mode: {prefill, decode:
{ops_per_step (kernels, memcpy and memset on a GPU, never a profiler annotation; operators on a CPU),
device_busy_fraction, top_ops: [{name, ms, count}], wall_ms (traced), plain_ms (untraced, median), plain_ms_range,
plain_runs, intensity, floor_ms (the pass's own floor under the roof), pace (floor / plain_ms), regime,
regime_reason, flags (why the regime is no lesson: too few untraced runs, or two more than 1.5x apart)}}},
refused: {mode: why}, note.
"""
from __future__ import annotations

from engine.bench import Bench
from engine.core.loaded import DEFAULT_MODE, MODES, LoadedModel
from engine.core.prompt import encode_prompt
from engine.measure.spread import LESSON_RUNS, lesson_flags
from engine.timeline import PROMPT
from engine.timeline.bench_decode import in_modes

# The profiler and the roofline (torch) are imported when the benchmark runs: ``bench profile --help`` needs no torch.


def add_arguments(p) -> None:
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated engine modes ({','.join(MODES)})")
    p.add_argument("--prompt", default=PROMPT, help="the prompt of the traced prefill (chat template applied)")
    p.add_argument("--repeats", type=int, default=LESSON_RUNS, help="untraced repeats of each step (plain_ms)")
    p.add_argument("--probe-mb", type=int, default=256, help="buffer size of the bandwidth probe (MiB)")


def run(lm: LoadedModel, args) -> dict:
    from engine.timeline import roofline as R
    from engine.timeline.profile import pace, profile_steps, regime

    names = [m.strip() for m in str(args.modes).split(",") if m.strip() in MODES] or [DEFAULT_MODE]
    models, refused = in_modes(lm, names)
    ids = list(encode_prompt(lm.tokenizer, args.prompt, use_chat_template=True).ids)
    probe = R.hardware_probe(lm.device, buffer_mb=args.probe_mb, matmul_dtype=lm.info.dtype)
    floor = R.decode_floor_ms(lm, probe.read_gb_s.median)
    ridge = probe.ridge
    out = {}
    for m, mlm in models.items():
        if m not in names:
            continue
        row = {}
        for p in profile_steps(mlm, ids, args.repeats):
            point = R.roofline_point(mlm, p.phase, p.tokens_in, p.context - p.tokens_in, p.plain_ms)
            pass_floor = R.pass_floor_ms(point, probe.read_gb_s.median, probe.matmul_gflop_s.median)
            r = regime(p, pass_floor, point.intensity, ridge)
            row[p.phase] = {**p.to_dict(), "intensity": point.intensity, "floor_ms": pass_floor,
                            "pace": pace(p, pass_floor), "regime": r.name, "regime_reason": r.reason,
                            "flags": list(lesson_flags(p.plain, f"{m} {p.phase} step (untraced)", "ms")
                                          + lesson_flags(probe.read_gb_s, "the bandwidth probe", "GB/s"))}
        out[m] = row
    return {
        "benchmark": "profile", "model": lm.name, "device": lm.info.device, "dtype": lm.info.dtype,
        "prompt_tokens": len(ids), "floor_ms": floor, "read_gb_s": probe.read_gb_s.median,
        "matmul_gflop_s": probe.matmul_gflop_s.median, "matmul_dtype": probe.matmul_dtype,
        "ridge_flop_per_byte": ridge, "modes": out,
        "refused": refused,
        "note": "measured under torch.profiler: ops_per_step counts kernels, memcpy and memset on a GPU "
                "(profiler annotations, the step's own range included, are never counted) and the innermost "
                "operators on a CPU; device_busy_fraction = union of the device lane's spans / the traced step's "
                "wall clock (profiler bookkeeping included); plain_ms = the same step untraced; floor and ridge "
                "derived from the measured bandwidth and matmul speed (the matmul in the model's dtype); a pass's "
                "floor_ms = max(bytes / bandwidth, FLOPs / matmul speed) with the output head counted once; the "
                "regime is named from the pace first; a compiled mode's prefill is eager",
    }


def summary(r: dict) -> str:
    lines = [f"floor {r['floor_ms']:.2f} ms per decode step; ridge {r['ridge_flop_per_byte']:.0f} FLOPs per byte "
             f"({r['matmul_dtype']} matmul)"]
    for m, row in r["modes"].items():
        for phase, p in row.items():
            lines.append(f"{m:>9} {phase:>7}: {p['ops_per_step']:>6,} {p['ops_are']}, device busy "
                         f"{p['device_busy_fraction']:.0%}, {p['plain_ms']:.2f} ms plain ({p['wall_ms']:.2f} traced), "
                         f"{p['pace']:.1%} of its floor's pace: {p['regime']}")
            lines.append("                   top: " + ", ".join(f"{o['name']} {o['ms']:.2f} ms x{o['count']}"
                                                            for o in p["top_ops"][:4]))
            lines += [f"                   noise: {f}" for f in p.get("flags", [])]
    lines += [f"refused: {why}" for why in r["refused"].values()]
    return "\n".join(lines)


BENCH = Bench("profile", run, add_arguments, summary)
