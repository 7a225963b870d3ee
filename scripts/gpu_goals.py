"""Every goal of issues 50 and 51 as one row of the GPU check's report (scripts/gpu_report.py): what was measured,
and a verdict: met, missed, or not measured with the reason (the check that would measure it timed out, failed, was
left for lack of time, or measured it from fewer than LESSON_RUNS runs, a figure no verdict stands on).

Reads the check's results as plain JSON (what scripts/gpu_check.sh writes, one file per check) and its steps
(name -> {status, limit_s, seconds, exit}); imports nothing from the engine, so it runs anywhere."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

LESSON_RUNS = 5  # engine.measure.spread.LESSON_RUNS: a figure a verdict stands on is a median of at least this many
MET, MISSED, NOT_MEASURED = "met", "missed", "not measured"
CPU_ONLY = "a goal for the 2-core CPU: measured by the CPU tests and benchmarks (docs/benchmarks.md), not on the GPU"


@dataclass(frozen=True)
class Row:
    issue: int
    goal: str
    measured: str
    verdict: str  # MET | MISSED | NOT_MEASURED
    why: str = ""  # for NOT_MEASURED: the reason; otherwise what the verdict rests on

    def to_dict(self) -> dict:
        return asdict(self)


class NotMeasured(Exception):
    """Why a goal has no verdict."""


Verdict = Callable[["Results"], tuple[str, bool, str]]  # -> (measured, met?, what the verdict rests on)
GOALS: list[tuple[int, str, Verdict]] = []  # (issue, goal, its verdict), in the issues' order: the order declared


def goal(issue: int, text: str) -> Callable[[Verdict], Verdict]:
    """Declare ``text``, a goal of ``issue``, measured by the decorated function."""
    def declare(fn: Verdict) -> Verdict:
        GOALS.append((issue, text, fn))
        return fn
    return declare


def invariant(prefix: str) -> Verdict:
    """A goal that scripts/gpu_invariants.py's compiled group checks: every check named ``prefix``... held."""
    return lambda r: _invariant(r, "compiled", prefix)


class Results:
    """The results (check name -> its JSON) and the steps that made them (check name -> its step record)."""

    def __init__(self, every: dict, steps: dict):
        self.every, self.steps = every, steps

    def get(self, name: str) -> dict:
        """The check's result, or NotMeasured saying why there is none (from its step: timed out, failed, left)."""
        r = self.every.get(name)
        if r:
            return r
        raise NotMeasured(self.why_missing(name))

    def why_missing(self, name: str) -> str:
        s = self.steps.get(name)
        if s is None:
            return f"the check `{name}` did not run (no step record)"
        status = s.get("status", "")
        if status == "timed out":
            return f"the check `{name}` timed out at its limit of {s.get('limit_s')} s"
        if status == "not run":
            return f"the check `{name}` was not run: {s.get('reason') or 'no time left in the call'}"
        if status == "failed":
            return f"the check `{name}` failed (exit {s.get('exit')}): {s.get('reason', '')}".rstrip(": ")
        return f"the check `{name}` ({status or 'done'}) wrote no result"


def _runs(n, what: str) -> None:
    if n is None or n < LESSON_RUNS:
        raise NotMeasured(f"{what} is the median of {n or 0} run(s), fewer than {LESSON_RUNS}")


def _f(x, digits: int = 2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


# --- issue 50 ---------------------------------------------------------------------------------------------------

@goal(50, "eager decode named launch-bound, with a busy share ≤ 20%")
def eager_launch_bound(r: Results) -> tuple[str, bool, str]:
    p = r.get("profile")["modes"]["eager"]["decode"]
    _runs(p.get("plain_runs"), "the eager decode step's untraced time")
    busy, regime = p["device_busy_fraction"], p["regime"]
    measured = (f"{regime}; device busy {busy:.0%} of the traced step; {p.get('ops_per_step', 0):,} {p.get('ops_are')}"
                f"; {p.get('pace', float('nan')):.1%} of its floor's pace")
    return measured, regime.startswith("launch") and busy <= 0.20, "regime named launch/dispatch-bound and busy ≤ 20%"


def _race_rows(r: Results) -> list[dict]:
    rows = [x for x in r.get("race")["rows"] if "error" not in x.get("cli", {"error": 1})]
    if not rows:
        raise NotMeasured("every CLI race of the check failed: " + "; ".join(
            str(x.get("cli", {}).get("error", ""))[:200] for x in r.get("race")["rows"]))
    return rows


@goal(50, "the race in compiled mode ≥ 2x compiled plain on the extractive preset")
def race_speedup(r: Results) -> tuple[str, bool, str]:
    rows = _race_rows(r)
    last = max(rows, key=lambda x: x["new_tokens"])
    c = last["cli"]
    _runs(c.get("runs"), f"the {last['new_tokens']}-token race")
    if c.get("noise"):
        raise NotMeasured(f"the {last['new_tokens']}-token race's runs were flagged as noise: "
                          + "; ".join(c.get("flags", []))[:300])
    lanes = f"plain lane {c['plain_mode']}, speculative lane {c['spec_mode']}"
    measured = "; ".join(f"{x['new_tokens']} tokens: x{_f(x['cli']['decode_speedup'])} decode only, "
                         f"x{_f(x['cli']['speedup'])} wall clock" for x in rows) + f" ({lanes}; CLI, medians)"
    compiled = c["plain_mode"] == c["spec_mode"] == "compiled"
    return measured, compiled and c["decode_speedup"] >= 2.0, \
        f"the {last['new_tokens']}-token race's decode-only speedup ≥ 2, both lanes compiled"


goal(50, "the compiled race identical in float32")(invariant("compiled race (float32"))


@goal(50, "the race page vs the CLI within 15% (16 and 64 tokens)")
def race_page_vs_cli(r: Results) -> tuple[str, bool, str]:
    rows, parts, ok = _race_rows(r), [], True
    for x in rows:
        page = x.get("page")
        if page is None:
            step = r.steps.get("race", {})
            raise NotMeasured(f"the race page did not run at {x['new_tokens']} tokens (the check: "
                              f"{step.get('status', 'no step record')}, limit {step.get('limit_s')} s)")
        if page.get("error") or not page.get("speedup"):
            raise NotMeasured(f"the race page at {x['new_tokens']} tokens gave no speedup: "
                              f"{page.get('error') or page.get('problems')}"[:300])
        lanes = (page.get("plain_mode"), page.get("spec_mode"))
        if lanes != (x["cli"]["plain_mode"], x["cli"]["spec_mode"]):
            raise NotMeasured(f"not the same race at {x['new_tokens']} tokens: the page's lanes ran {lanes[0]} / "
                              f"{lanes[1]}, the CLI's {x['cli']['plain_mode']} / {x['cli']['spec_mode']}")
        ratio = page["speedup"] / x["cli"]["speedup"]
        ok = ok and 0.85 <= ratio <= 1.15
        parts.append(f"{x['new_tokens']} tokens: page x{_f(page['speedup'])} vs CLI x{_f(x['cli']['speedup'])} "
                     f"({ratio:.2f})")
    want = {16, 64}
    missing = want - {x["new_tokens"] for x in rows}
    if missing:
        raise NotMeasured(f"no race at {sorted(missing)} tokens; measured: {'; '.join(parts)}")
    return "; ".join(parts), ok, "page / CLI within 0.85-1.15 at 16 and 64 tokens (wall clock, medians of each)"


def _invariant(r: Results, group: str, prefix: str) -> tuple[str, bool, str]:
    checks = [c for c in r.get(f"invariants-{group}")["checks"] if c["check"].startswith(prefix)]
    if not checks:
        raise NotMeasured(f"scripts/gpu_invariants.py ({group}) did not reach '{prefix}'")
    bad = [c for c in checks if not c["ok"]]
    measured = f"{len(checks) - len(bad)} of {len(checks)} held" + (f"; {bad[0]['detail'][:200]}" if bad else
                                                                     f"; {checks[0]['detail'][:160]}")
    return measured, not bad, "scripts/gpu_invariants.py on the real weights"


@goal(50, "a class of 20 in compiled mode ≥ 8x serial compiled")
def class_vs_serial(r: Results) -> tuple[str, bool, str]:
    c = r.get("classroom-compiled")
    _runs(min(sum(1 for x in c["runs"] if x["batching"]), sum(1 for x in c["runs"] if not x["batching"])),
          "each side of the class")
    ratio = c["throughput_ratio_batched_vs_serial"]
    measured = (f"{c['sessions']} students: batched x{ratio:.2f} serial ({_f(c['batched_throughput_tok_s'], 0)} vs "
                f"{_f(c['serial_throughput_tok_s'], 0)} tokens/s); batched ran {c['batched_mode']}, serial "
                f"{c['serial_mode']}; same answers {c['same_answers']}")
    ok = ratio >= 8.0 and c["batched_mode"] == c["serial_mode"] == "compiled" and c["sessions"] >= 20
    return measured, ok, "a class of 20, both workers compiled, batched throughput ≥ 8x serial (medians)"


@goal(50, "the compiled class faster than the eager batch")
def class_vs_eager_batch(r: Results) -> tuple[str, bool, str]:
    c, e = r.get("classroom-compiled"), r.get("classroom-eager")
    _runs(sum(1 for x in c["runs"] if x["batching"]), "the compiled batch")
    _runs(sum(1 for x in e["runs"] if x["batching"]), "the eager batch")
    measured = (f"last answer ready: compiled batch {c['batched_last_ready_s']:.3f} s ({c['batched_mode']}), eager "
                f"batch {e['batched_last_ready_s']:.3f} s; {_f(c['batched_throughput_tok_s'], 0)} vs "
                f"{_f(e['batched_throughput_tok_s'], 0)} tokens/s")
    ok = c["batched_mode"] == "compiled" and c["batched_last_ready_s"] < e["batched_last_ready_s"]
    return measured, ok, "the compiled batch's last answer ready before the eager batch's (medians)"


goal(50, "the compiled class's answers equal each student's alone (float32)")(
    invariant("compiled class batch (float32"))


def _sweep(r: Results) -> dict:
    t = r.get("timeline")
    if not t.get("sweep"):
        raise NotMeasured("the sweep has no rows")
    return t


@goal(50, "compiled TTFT at 16 tokens ≤ 5 ms")
def ttft_16(r: Results) -> tuple[str, bool, str]:
    row = next((x for x in _sweep(r)["sweep"] if x["prompt_tokens"] == 16), None)
    if row is None:
        raise NotMeasured("the sweep has no 16-token prompt")
    _runs(row["ttft_ms"].get("n"), "TTFT at 16 tokens")
    ms, mode = row["ttft_ms"]["median"], str(row.get("prefill_mode", ""))
    measured = f"{ms:.2f} ms ({_f(row['ttft_ms'].get('min'))}-{_f(row['ttft_ms'].get('max'))}), prefill ran {mode}"
    return measured, ms <= 5.0 and mode.startswith("compiled"), "median TTFT ≤ 5 ms with a compiled prefill"


@goal(50, "the sweep shows where prefill climbs")
def sweep_climbs(r: Results) -> tuple[str, bool, str]:
    t = _sweep(r)
    first, last = t["sweep"][0], t["sweep"][-1]
    at = t.get("climb_started_at")
    measured = (f"{first['prompt_tokens']:,} → {last['prompt_tokens']:,} tokens: TTFT "
                f"{first['ttft_ms']['median']:.1f} → {last['ttft_ms']['median']:.1f} ms; "
                + (f"started to climb at {at:,} tokens" if at else "no climb")
                + (f"; {t['memory_short_at']:,} tokens did not fit" if t.get("memory_short_at") else ""))
    return measured, at is not None, "the sweep names the length where TTFT passed 1.5x the shortest's"


goal(50, "compiled greedy = eager in float32 on the GPU")(invariant("compiled = eager greedy (float32)"))


@goal(50, "the ridge measured in the model's dtype")
def ridge_dtype(r: Results) -> tuple[str, bool, str]:
    p = r.get("profile")
    measured = (f"ridge {p['ridge_flop_per_byte']:.0f} FLOP/byte from a {p['matmul_dtype']} matmul; model in "
                f"{p['dtype']}")
    return measured, p["matmul_dtype"] == p["dtype"], "the ridge's matmul in the model's dtype"


@goal(50, "the precision answer agrees with bench decode (no noisy pair)")
def precision_agrees(r: Results) -> tuple[str, bool, str]:
    p = r.get("precision")
    _runs(p.get("repeats"), "bench precision")
    row = next((x for x in p["rows"] if x["precision"] == "bfloat16"), None)
    if row is None:
        raise NotMeasured("bench precision has no bfloat16 row on this device")
    b, f = r.get("decode-bfloat16")["modes"]["eager"], r.get("decode-float32")["modes"]["eager"]
    from_decode = f["decode_ms_per_token"] / b["decode_ms_per_token"]
    gap = max(row["speedup_vs_float32"], from_decode) / min(row["speedup_vs_float32"], from_decode)
    flags = "; ".join(row.get("flags", []))[:200]
    measured = (f"bfloat16 vs float32: x{row['speedup_vs_float32']:.2f} (bench precision, median of {p['repeats']}) "
                f"vs x{from_decode:.2f} (bench decode, eager){'; flagged: ' + flags if flags else ''}")
    return measured, gap <= 1.5, "the two benchmarks agree within 1.5x"


@goal(50, "every page runs in eager and compiled mode on the GPU")
def pages_run(r: Results) -> tuple[str, bool, str]:
    p = r.get("pages")
    rows = p["rows"]
    bad = [x for x in rows if x["problems"]]
    left = [x for x in rows if x.get("not_run")]
    measured = (f"{len(rows) - len(left)} of {len(rows)} page runs done ({', '.join(p.get('modes', []))}), "
                f"{sum(len(x.get('buttons_pressed', [])) for x in rows)} buttons pressed, {len(bad)} with a problem"
                + (f": {bad[0]['page']} ({bad[0]['mode']}) {bad[0]['problems'][0][:160]}" if bad else ""))
    if left and not bad:
        raise NotMeasured(measured + f"; not run: {left[0]['page']} ({left[0]['mode']}): {left[0]['not_run']}")
    return measured, not bad, "AppTest, every button pressed, in each mode"


goal(50, "CPU: every mode's greedy output identical to eager in float32; each graph's compile time shown first")(
    lambda r: cpu_goal())


# --- issue 51 ---------------------------------------------------------------------------------------------------

def _compiled_bf16(r: Results) -> dict:
    d = r.get("decode-bfloat16")
    _runs(d.get("repeats"), "bench decode's bfloat16 run")
    c = d["modes"].get("compiled")
    if c is None:
        refused = "; ".join(d.get("refused", {}).values())
        raise NotMeasured(f"compiled mode was refused: {refused}"[:300] if refused else
                          f"compiled mode was not measured (modes: {', '.join(d['modes'])})")
    return c


def ms_per_token(limit: float) -> Verdict:
    def verdict(r: Results) -> tuple[str, bool, str]:
        c = _compiled_bf16(r)
        ms = c["decode_ms_per_token"]
        return (f"{ms:.3f} ms/token compiled ({c['decode_ms_min']:.3f}-{c['decode_ms_max']:.3f}), ran {c['ran_as']}",
                ms <= limit and c["ran_as"] == "compiled", f"median decode step ≤ {limit} ms, compiled")
    return verdict


goal(51, "≤ 1.0 ms/token in bfloat16 (compiled)")(ms_per_token(1.0))
goal(51, "stretch: ≤ 0.5 ms/token in bfloat16 (compiled)")(ms_per_token(0.5))


@goal(51, "≤ 250 kernels per decode step")
def kernels_per_step(r: Results) -> tuple[str, bool, str]:
    c = _compiled_bf16(r)
    eager = r.get("decode-bfloat16")["modes"]["eager"]
    if c["kernels_are"] != "kernels":
        raise NotMeasured(f"{c['kernels_per_step']:,} {c['kernels_are']} per compiled step: not on a GPU")
    kinds = ", ".join(f"{k} {v}" for k, v in c.get("kernels_by_kind", {}).items())
    measured = (f"{c['kernels_per_step']:,} {c['kernels_are']} per compiled step ({kinds}); eager "
                f"{eager['kernels_per_step']:,}")
    return measured, c["kernels_per_step"] <= 250, "≤ 250 GPU kernels per step"


@goal(51, "≥ 2x faster than transformers' static cache + compile in the same run")
def vs_transformers(r: Results) -> tuple[str, bool, str]:
    c = _compiled_bf16(r)
    peer = r.get("decode-bfloat16").get("peers", {}).get("transformers")
    if peer is None:
        raise NotMeasured("bench decode ran without its transformers peer (--peer transformers)")
    ratio = peer["decode_ms_per_token"] / c["decode_ms_per_token"]
    measured = (f"engine compiled {c['decode_ms_per_token']:.3f} ms/token vs transformers' static cache + compile "
                f"{peer['decode_ms_per_token']:.3f} (x{ratio:.2f}), same run")
    return measured, ratio >= 2.0, "transformers' ms/token ≥ 2x the engine's, measured in the same run"


def cpu_goal():
    raise NotMeasured(CPU_ONLY)


goal(51, "CPU: ≤ 300 operators and ≤ 130 matmuls per compiled step, compiled ≥ 1.5x eager, identical in float32")(
    lambda r: cpu_goal())


def goal_rows(every: dict, steps: dict) -> list[Row]:
    """One row per goal, in the issues' order."""
    r, rows = Results(every, steps), []
    for issue, goal, fn in GOALS:
        try:
            measured, ok, rule = fn(r)
            rows.append(Row(issue, goal, measured, MET if ok else MISSED, rule))
        except NotMeasured as exc:
            rows.append(Row(issue, goal, "", NOT_MEASURED, str(exc)))
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:  # a result of another shape: said
            rows.append(Row(issue, goal, "", NOT_MEASURED, f"its result could not be read ({type(exc).__name__}: "
                                                         f"{str(exc)[:120]})"))
    return rows
