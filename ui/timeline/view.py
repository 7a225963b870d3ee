"""Display values for the prefill-vs-decode page: metrics, captions and tables from its measurements (the page
and ui/timeline/sections.py only lay them out). Pure: no st.*."""
from __future__ import annotations

import pandas as pd

from engine.core.loaded import Mode
from engine.measure.spread import lesson_flags
from engine.predictions.records import timeline_verdict
from engine.timeline import experiment as T
from engine.timeline import memory as M
from engine.timeline import roofline as R
from engine.timeline.profile import NEAR_FLOOR
from ui.frame.lessons import lesson

MB = 2**20


def rng(s: T.Spread, unit: str = "ms", nd: int = 1) -> str:
    """A median with its range and count: '12.3 ms (range 11.0 to 14.2, n=3)'."""
    return f"{s.median:.{nd}f} {unit} (range {s.lo:.{nd}f} to {s.hi:.{nd}f}, n={s.n})"


def run_metrics(tl: T.Timeline) -> list[tuple[str, str, str]]:
    """(label, value, help) for the four metrics of the run's timeline."""
    has_decode = bool(tl.tpot_ms.n)
    return [("Time to first token", f"{tl.ttft_ms:.0f} ms", "Measured: the prefill pass plus sampling."),
            ("Time per output token", f"{tl.tpot_ms.median:.0f} ms" if has_decode else "n/a",
             "Measured: median decode step." if has_decode else "Only one token was generated."),
            ("Tokens / s (whole run)", f"{tl.tokens_per_s:.1f}", "Derived: new tokens / total measured time."),
            ("Tokens / s (decode only)", f"{tl.decode_tokens_per_s:.1f}" if has_decode else "n/a",
             "Derived: 1000 / median decode step in ms.")]


def gantt_caption(tl: T.Timeline) -> str:
    return (f"Each bar is one forward pass plus sampling, timed after a device sync, placed end to end. Prefill: "
            f"{tl.prompt_tokens} prompt tokens in one pass ({tl.ttft_ms:.0f} ms); then {len(tl.bars) - 1} decode "
            f"passes of one token each" + (f", {rng(tl.tpot_ms)}." if tl.tpot_ms.n else "."))


def cache_caption(cc: T.CacheComparison) -> str:
    return (f"Per-step wall time after a device sync, greedy, {cc.prompt_tokens} prompt tokens. Without a cache, "
            f"step k recomputes {cc.prompt_tokens} + k - 1 tokens; with it, each decode step feeds 1.")


def cache_last_step(cc: T.CacheComparison) -> str | None:
    """The last step's two times in a sentence (None with fewer than two steps)."""
    last = len(cc.cached_ms) - 1
    if last < 1:
        return None
    return (f"Last step: **{cc.recompute_ms[last]:.0f} ms** recomputing {cc.prompt_tokens + last} tokens vs "
            f"**{cc.cached_ms[last]:.0f} ms** with the cache (measured, one run each).")


def sweep_caption(sw: T.Sweep) -> str:
    return (f"Each length: a warm-up, then medians over {sw.repeats} repeat(s); whiskers span min to max. TPOT is "
            f"the median of {sw.new_tokens - 1} decode steps in each repeat.")


def climb_text(sw: T.Sweep, ext: dict, device: str) -> str:
    """Where prefill started to climb on this device, and how far the sweep had to go to see it (measured)."""
    if not sw.rows:
        return "No prompt length could be measured."
    first, last = sw.rows[0], sw.rows[-1]
    grow = last.ttft_ms.median / first.ttft_ms.median if first.ttft_ms.median > 0 else float("nan")
    start = T.climb_start(sw.rows)
    parts = []
    if ext["extended"]:
        parts.append(f"Up to {ext['extended'][0] // 2:,} prompt tokens the time to first token hardly moved on this "
                     f"device ({device}), so the sweep went on doubling the prompt, to {ext['extended'][-1]:,}.")
    if start is not None:
        parts.append(f"**Prefill started to climb at {start:,} prompt tokens** (time to first token at least "
                     f"{T.STARTED:g}× the {first.prompt_tokens}-token prompt's); from {first.prompt_tokens} to "
                     f"{last.prompt_tokens:,} tokens it grew **{grow:.1f}×**, while the time per output token "
                     f"grew {last.tpot_ms.median / first.tpot_ms.median:.1f}×.")
    else:
        parts.append(f"From {first.prompt_tokens} to {last.prompt_tokens:,} prompt tokens the time to first token "
                     f"grew only {grow:.1f}×: on this device prefill has not started to climb yet (each pass "
                     "waits on fixed costs, not on the prompt's work).")
    if ext["memory_short_at"]:
        parts.append(f"{ext['memory_short_at']:,} tokens did not fit in this device's memory: the sweep ends there.")
    elif not T.climbed(sw.rows) and ext["extended"]:
        parts.append("The model's context length ends the sweep there.")
    return " ".join(parts)


def sweep_table(sw: T.Sweep) -> pd.DataFrame:
    return pd.DataFrame([{
        "prompt tokens": r.prompt_tokens, "TTFT median (ms)": round(r.ttft_ms.median, 1),
        "TTFT range (ms)": f"{r.ttft_ms.lo:.1f} to {r.ttft_ms.hi:.1f}", "TPOT median (ms)": round(r.tpot_ms.median, 1),
        "TPOT range (ms)": f"{r.tpot_ms.lo:.1f} to {r.tpot_ms.hi:.1f}", "prefill": r.prefill} for r in sw.rows])


def breakdown_caption(bd: T.Breakdown) -> str:
    return (f"Share of each stage's median time over {bd.repeats} repeat(s), your prompt ({bd.prefill.tokens_in} "
            f"tokens) and the decode step after it; sampling with your sidebar settings.")


def breakdown_table(bd: T.Breakdown) -> pd.DataFrame:
    def phase(p, name):
        s = p.stage_ms[name]
        return {"median (ms)": round(s.median, 2), "range (ms)": f"{s.lo:.2f} to {s.hi:.2f}",
                "share": f"{p.shares()[name]:.0%}"}

    return pd.DataFrame([{"stage": stage, "modules timed": str(bd.module_counts.get(stage, "-")),
                          **{f"prefill {k}": v for k, v in phase(bd.prefill, stage).items()},
                          **{f"decode {k}": v for k, v in phase(bd.decode, stage).items()}} for stage in T.STAGES])


def hooks_caption(bd: T.Breakdown) -> str:
    return (f"Hooks add a little overhead (a sync and a clock read around each of {sum(bd.module_counts.values())} "
            f"modules): the whole pass took {rng(bd.prefill.hooked_total_ms)} with hooks vs "
            f"{rng(bd.prefill.plain_total_ms)} without (prefill), and {rng(bd.decode.hooked_total_ms, nd=2)} vs "
            f"{rng(bd.decode.plain_total_ms, nd=2)} (decode).")


def probe_metrics(probe: R.HardwareProbe, fc: R.FloorCheck) -> list[tuple[str, str, str]]:
    """(label, value, help) for bandwidth, matmul throughput and the decode-step floor (from the bandwidth measured
    beside the step)."""
    # the bandwidth the floor divides by, so the card, the floor and the chart show one figure; the probe measured on
    # its own, at another moment, is in the help (a walkthrough saw 11.3 GB/s here beside a floor from 10.0 GB/s)
    return [("Memory bandwidth (read)", f"{fc.read_gb_s.median:.1f} GB/s",
             f"Measured beside the decode step: summing a tensor larger than the caches, {rng(fc.read_gb_s, 'GB/s')}. "
             f"Measured on its own before: {probe.read_gb_s.median:.1f} GB/s (a {probe.buffer_mb:.0f} MiB tensor, "
             f"range {probe.read_gb_s.lo:.1f} to {probe.read_gb_s.hi:.1f}); copy {probe.copy_gb_s.median:.1f} GB/s "
             "(read + write)."),
            ("Matmul throughput", f"{probe.matmul_gflop_s.median:.0f} GFLOP/s",
             f"Measured: {probe.matmul_n}x{probe.matmul_n} matrix multiply in {probe.matmul_dtype} (the model's "
             f"dtype), 2n\u00b3 FLOPs, range {probe.matmul_gflop_s.lo:.0f} to {probe.matmul_gflop_s.hi:.0f}, "
             f"{probe.threads} threads."),
            ("Decode-step floor", f"{fc.floor_ms.median:.2f} ms",
             f"Derived: {fc.weight_bytes / 1e6:.0f} MB of weights read per step / the bandwidth measured beside the "
             f"step, {rng(fc.read_gb_s, 'GB/s')}.")]


def probe_caption(probe: R.HardwareProbe) -> str:
    return (f"Measured on {probe.device} with {probe.threads} threads: read {rng(probe.read_gb_s, 'GB/s')}; "
            f"copy {rng(probe.copy_gb_s, 'GB/s')}; matmul in {probe.matmul_dtype} "
            f"{rng(probe.matmul_gflop_s, 'GFLOP/s', 0)}.")


def floor_caption(fc: R.FloorCheck, dtype: str) -> str:
    return (f"Measured alternately after a warm-up, {fc.step_ms.n} rounds of a {fc.probe_mb:.0f} MiB bandwidth probe "
            f"then one decode step of this prompt (whiskers: min to max). Floor = {fc.weight_bytes / 1e6:.0f} MB of "
            f"weights ({dtype}) / each round's bandwidth (derived). Pace = floor / step = {fc.pace:.0%} (medians).")


def floor_text(fc: R.FloorCheck) -> tuple[str, bool]:
    """The lesson's sentence on the step against its floor, from the measured pace and the device (no GPU story on a
    CPU, no CPU story on a GPU); and whether it is a lesson (False: the runs are too few or disagree, so the text
    says that instead)."""
    if fc.flags:
        return lesson("timeline", "floor noisy", flags=" ".join(fc.flags)), False
    step, floor = rng(fc.step_ms, nd=2), rng(fc.floor_ms, nd=2)
    if fc.pace > 1:
        return lesson("timeline", "floor below", step=step, floor=floor) + " " + lesson("timeline", "below floor"), True
    name = "floor" if fc.pace >= NEAR_FLOOR else "floor gpu" if fc.device.startswith("cuda") else "floor cpu"
    return lesson("timeline", name, step=step, floor=floor, pace=fc.pace), True


def roofline_points(lm, tl: T.Timeline) -> list[R.RooflinePoint]:
    """This run's prefill and one decode step, at their measured times."""
    return [R.roofline_point(lm, f"prefill ({tl.prompt_tokens} tok)", tl.prompt_tokens, 0, tl.ttft_ms),
            R.roofline_point(lm, "decode (1 tok)", 1, tl.prompt_tokens, tl.tpot_ms.median)]


def memory_metrics(mem: M.MemoryComparison) -> list[tuple[str, str, str | None]]:
    """(label, value, help) for what each pass saved and the peak ratio."""
    return [("Saved for backward", f"{mem.saved_for_backward_bytes / MB:.1f} MiB",
             f"Measured exactly: {mem.saved_tensor_count} tensors autograd stored (weights excluded)."),
            ("Saved under inference mode", f"{mem.inference_saved_bytes / MB:.1f} MiB", None),
            ("Peak ratio", f"{mem.training_peak_bytes / max(mem.inference_peak_bytes, 1):.1f}\u00d7",
             "Measured: peak tensor memory keeping activations / under inference mode.")]


def memory_caption(mem: M.MemoryComparison) -> str:
    return (f"Method: {mem.method}. Both passes keep the logits ({mem.logits_bytes / MB:.1f} MiB), as a loss would "
            "need.")


def short_op(name: str, limit: int = 48) -> str:
    """An operator's or kernel's name cut to fit a table (compiled kernels are named after every op they fuse)."""
    return name if len(name) <= limit else name[: limit - 1] + "\u2026"


def kernel_rows(profiles) -> pd.DataFrame:
    """One row per traced step: mode, phase, operators or kernels (all, and per layer of each kind: eager is the
    step before compiled mode's fusion, compiled after it), device busy share, times, regime."""
    return pd.DataFrame([{
        "mode": p.mode, "step": p.phase + ("" if p.graph or p.mode == Mode.EAGER else " (runs eager)"),
        f"{p.op_word} per step": p.ops,
        **{f"{kind} per layer": round(n, 1) for kind, n in p.per_layer().items()},
        "device busy": f"{p.device_busy_fraction:.0%}", "traced (ms)": round(p.wall_ms, 2),
        "plain (ms)": round(p.plain_ms, 2), "regime": r.name} for p, r in profiles])


def top_ops_table(p) -> pd.DataFrame:
    return pd.DataFrame([{"operator" if p.device == "cpu" else "kernel": short_op(o.name), "ms": round(o.ms, 3),
                          "calls": o.count, "share of busy time": f"{o.ms / p.device_busy_ms:.0%}"
                          if p.device_busy_ms > 0 else "n/a"} for o in p.top_ops])


def kernels_caption(p) -> str:
    lane = "the kernels the GPU ran (CUDA events)" if p.device == "cuda" else \
        ("the operators that do their own work (aten kernels such as aten::mm, and compiled kernels; wrappers, "
         "views, reshapes and allocations left out: on a CPU host and device are one thread)")
    return (f"Traced with torch.profiler: the host lane is each operator called from Python (or the compiled graph's "
            f"call), the device lane {lane}. {p.ops:,} {p.op_word}; the device lane is busy "
            f"{p.device_busy_ms:.2f} of {p.wall_ms:.2f} ms ({p.device_busy_fraction:.0%}). The profiler's own "
            f"bookkeeping slows the traced step: the same step untraced took {p.plain_ms:.2f} ms (median).")


def regime_text(pairs, device: str, read_gb_s: T.Spread | None = None) -> str:
    """The lesson's verdict, one sentence per traced step, from its numbers (engine.timeline.profile.regime), each
    with the spread of its untraced runs; a step whose runs are too few or disagree (or a bandwidth, ``read_gb_s``,
    whose runs do) is not named: its line says why."""
    gpu = device.startswith("cuda")
    probe_flags = lesson_flags(read_gb_s, "the bandwidth probe", "GB/s") if read_gb_s is not None else ()
    lines, steps, named = [], {}, set()
    for p, r in pairs:
        what = f"{p.mode} mode, {p.phase}{'' if p.graph or p.mode == 'eager' else ' (an eager pass)'}"
        steps[(p.mode, p.phase)] = p
        flags = lesson_flags(p.plain, f"the untraced {p.phase} step", "ms") + probe_flags
        if flags:
            lines.append(f"- **{what}: not named.** " + " ".join(flags) + " Measure again.")
            continue
        named.add((p.mode, p.phase))
        lines.append(f"- **{what}: {r.name}.** {r.reason[0].upper()}{r.reason[1:]} (untraced: "
                     f"{rng(p.plain, nd=2)}).")
    e, c = steps.get((Mode.EAGER, "decode")), steps.get((Mode.COMPILED, "decode"))
    if e is not None and c is not None:
        timed = {(Mode.EAGER, "decode"), (Mode.COMPILED, "decode")} <= named  # counts are exact; times only when steady
        lines.append(f"- Compiled, the decode step runs **{c.ops:,}** {c.op_word} instead of {e.ops:,}"
                     + (f" and takes {c.plain_ms:.2f} ms instead of {e.plain_ms:.2f} ms untraced "
                        f"({e.plain_ms / c.plain_ms:.2f}\u00d7)" if timed else " (their times are too noisy to "
                                                                                "compare, above)")
                     + ("; on a GPU the whole step is one CUDA graph launch." if gpu else "."))
    return "\n".join(lines)


def timeline_of(trace) -> T.Timeline:
    """The run's timeline as the page draws it: one prefill bar, then one bar per decode step."""
    return T.timeline(trace)


def verdict(tl: T.Timeline):
    """Which choice of the page's question this run's timeline decides."""
    return timeline_verdict(tl)
