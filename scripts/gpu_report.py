"""The GPU check's report (scripts/gpu_check.sh writes it last): one section for docs/gpu.md, in Markdown, and the same
in one JSON file. First every goal of issues 50 and 51 as a row (scripts/gpu_goals.py: measured, met / missed / not
measured and why), then the measurements side by side: decode eager vs compiled vs transformers vs the floor, the
kernels and the busy share, the race page vs the CLI, the class batched vs serial vs the eager batch, time to first
token by prompt length, precision, compile times, the pages, the invariants, and every check with its limit, its
time and how it ended.

    python scripts/gpu_report.py RESULTS_DIR OUT.md OUT.json

RESULTS_DIR holds one JSON per check (decode-bfloat16.json, ...), steps.tsv (name, phase, limit s, seconds, exit,
status, reason: one line per check) and machine.txt; a check's log NAME.log gives a failure's last line and the CUDA
graph skips inductor reported."""
from __future__ import annotations

import datetime
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_goals import MET, MISSED, NOT_MEASURED, goal_rows  # noqa: E402

SKIP_LINE = re.compile(r"skipping cudagraphs[^\n]*", re.IGNORECASE)


def load(d: Path, name: str) -> dict | None:
    try:
        return json.loads((d / name).read_text())
    except (OSError, ValueError):
        return None


def text(d: Path, name: str) -> str:
    try:
        return (d / name).read_text(errors="replace").strip()
    except OSError:
        return ""


def steps_of(d: Path) -> dict:
    """steps.tsv as {name: {phase, limit_s, seconds, exit, status, reason}}; a failure's reason is its log's last
    line when the step gave none."""
    out = {}
    for line in text(d, "steps.tsv").splitlines():
        f = line.split("\t") + [""] * 7
        name, phase, limit, seconds, code, status, reason = f[:7]
        if not name:
            continue
        if status == "failed" and not reason:
            tail = [x for x in text(d, f"{name}.log").splitlines() if x.strip()]
            reason = tail[-1][:300] if tail else ""
        out[name] = {"phase": phase, "limit_s": _int(limit), "seconds": _int(seconds), "exit": _int(code),
                     "status": status, "reason": reason}
    return out


def _int(x: str) -> int | None:
    try:
        return int(x)
    except ValueError:
        return None


def _ms(x, digits: int = 2) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def table(head: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join("" if c is None else str(c).replace("|", "/") for c in r) + " |" for r in rows]


def goals_md(rows) -> list[str]:
    mark = {MET: "**met**", MISSED: "**missed**", NOT_MEASURED: "not measured"}
    return table(["issue", "goal", "measured", "verdict", "on what / why not"],
                 [[r.issue, r.goal, r.measured, mark[r.verdict], r.why] for r in rows])


def decode_md(every: dict, prof: dict | None) -> list[str]:
    rows = []
    for dtype in ("bfloat16", "float32"):
        d = every.get(f"decode-{dtype}")
        if not d:
            continue
        m, peer = d["modes"], d.get("peers", {}).get("transformers", {})
        e, c = m.get("eager", {}), m.get("compiled", {})
        busy = {k: (prof or {}).get("modes", {}).get(k, {}).get("decode", {}).get("device_busy_fraction")
                for k in ("eager", "compiled")} if prof and prof.get("dtype") == dtype else {}
        rows.append([dtype, _ms(e.get("decode_ms_per_token")), _ms(c.get("decode_ms_per_token")),
                     _ms(c.get("unwatched_ms_per_token")), _ms(peer.get("decode_ms_per_token")),
                     _ms(d.get("floor_ms_per_token"), 3),
                     f"{c['ratio_to_eager']:.2f}x" if c else "",
                     f"{peer['decode_ms_per_token'] / c['decode_ms_per_token']:.2f}x" if c and peer else "",
                     f"{e.get('kernels_per_step', '')} → {c.get('kernels_per_step', '')} {c.get('kernels_are', '')}",
                     " / ".join(f"{busy[k]:.0%}" if busy.get(k) is not None else "" for k in busy),
                     f"{c.get('same_tokens', '')} / {peer.get('same_tokens', '')}", c.get("ran_as", "refused")])
    if not rows:
        return []
    return ["### Decode: eager, compiled, transformers' compile and the floor, side by side", "",
            *table(["dtype", "eager ms/token", "compiled ms/token", "compiled unwatched ms/token",
                    "transformers ms/token", "floor ms",
                    "compiled vs eager", "compiled vs transformers", "kernels/step eager → compiled",
                    "busy eager / compiled", "same tokens compiled / transformers", "compiled ran as"], rows),
            "", "Each a median decode step over 3 prompts x the repeats (bench decode --modes eager,compiled --peer "
                "transformers); unwatched: the same decode with no one watching token by token (the ids stay on "
                "the device and are read once every 16 steps, timed together); the floor = weight bytes / measured "
                "read bandwidth; busy share from bench profile.", ""]


def profile_md(p: dict | None) -> list[str]:
    if not p:
        return []
    rows = [[m, phase, f"{x['ops_per_step']:,} {x['ops_are']}", f"{x['device_busy_fraction']:.0%}",
             f"{x['plain_ms']:.3f} ({x['plain_ms_range'][0]:.3f}-{x['plain_ms_range'][1]:.3f}, n={x['plain_runs']})",
             f"{x.get('pace', float('nan')):.1%}", x["regime"],
             ", ".join(f"{o['name'][:40]} {o['ms']:.3f} ms x{o['count']}" for o in x["top_ops"][:3])]
            for m, row in p["modes"].items() for phase, x in row.items()]
    return ["### One step, kernel by kernel (bench profile)", "",
            f"Floor {p['floor_ms']:.3f} ms per decode step; ridge {p['ridge_flop_per_byte']:.0f} FLOP/byte "
            f"({p['matmul_dtype']} matmul; model in {p['dtype']}).", "",
            *table(["mode", "step", "kernels", "busy", "plain ms (range, n)", "of floor's pace", "regime",
                    "top kernels"], rows), ""]


def race_md(r: dict | None) -> list[str]:
    if not r:
        return []
    rows = []
    for x in r["rows"]:
        c, p = x.get("cli", {}), x.get("page") or {}
        rows.append([x["new_tokens"],
                     c.get("error") or f"x{c['decode_speedup']:.2f} (x{c['speedup']:.2f})",
                     p.get("error") or (f"x{_ms(p.get('decode_speedup'))} (x{_ms(p.get('speedup'))})"
                                        if p else "not run"),
                     _ms(x.get("page_vs_cli")), f"CLI {c.get('plain_mode', '')} / {c.get('spec_mode', '')}, page "
                     f"{p.get('plain_mode', '')} / {p.get('spec_mode', '')}",
                     f"{p.get('identical', '')} (CLI {c.get('identical', '')})", "; ".join(c.get("flags", []))[:200]])
    return [f"### The race in {r['mode']} mode: page vs `python -m engine race` ({r['prompt']} preset, lookup, k = 4, "
            f"greedy, {r['precision']})", "",
            *table(["new tokens", "CLI decode only (wall)", "page decode only (wall)", "page / CLI (wall)",
                    "lanes plain / speculative", "identical", "flags"], rows), ""]


def class_md(every: dict) -> list[str]:
    rows = []
    for mode in ("compiled", "eager"):
        c = every.get(f"classroom-{mode}")
        if not c:
            continue
        for batching in (False, True):
            runs = [x for x in c["runs"] if x["batching"] == batching]
            if not runs:
                continue
            last = sorted(x["last_ready_s"] for x in runs)
            tput = sorted(x["throughput_tok_s"] for x in runs)
            rows.append([f"--mode {mode}", "batched" if batching else "serial", runs[0]["mode"],
                         f"{last[len(last) // 2]:.3f} ({last[0]:.3f}-{last[-1]:.3f})", f"{tput[len(tput) // 2]:.0f}",
                         max(x["largest_batch"] for x in runs), len(runs)])
    if not rows:
        return []
    return ["### A class of 20: batched vs serial, compiled vs eager (bench classroom)", "",
            *table(["run", "worker", "decode ran", "last answer ready s (range)", "tokens/s", "largest batch", "n"],
                   rows), ""]


def sweep_md(t: dict | None) -> list[str]:
    if not t:
        return []
    rows = [[f"{x['prompt_tokens']:,}", f"{x['ttft_ms']['median']:.2f} ({x['ttft_ms']['min']:.2f}-"
             f"{x['ttft_ms']['max']:.2f}, n={x['ttft_ms']['n']})", x.get("prefill_mode", ""),
             f"{x['tpot_ms']['median']:.2f}"] for x in t["sweep"]]
    return ["### Time to first token by prompt length (bench timeline, compiled mode)", "",
            *table(["prompt tokens", "TTFT ms (range, n)", "prefill ran", "TPOT ms"], rows), "",
            f"Started to climb at {t.get('climb_started_at')} tokens; extended to {t.get('extended')}; memory short "
            f"at {t.get('memory_short_at')}. Decode step {t['decode_step_ms']:.3f} ms vs floor "
            f"{t['decode_floor_ms']:.3f} ms.", ""]


def precision_md(p: dict | None) -> list[str]:
    if not p:
        return []
    rows = [[x["precision"], x.get("mode", ""), f"{x['decode_weight_bytes'] / 1e6:.0f}", f"{x['floor_ms']:.3f}",
             f"{x['decode_ms']['median']:.2f} ({x['decode_ms']['min']:.2f}-{x['decode_ms']['max']:.2f})",
             f"{x['speedup_vs_float32']:.2f}x", f"{x['tokens_identical']}/{x['new_tokens']}",
             "; ".join(x.get("flags", []))[:160]] for x in p["rows"]]
    return [f"### bench precision (median of {p.get('repeats')})", "",
            *table(["precision", "mode", "MB/step", "floor ms", "decode ms (range)", "vs float32", "same tokens",
                    "flags"], rows), ""]


def compile_md(times: dict | None) -> list[str]:
    if not times:
        return []
    flat = []
    for k, v in times.items():
        flat += [(f"{k} {k2}", v2) for k2, v2 in v.items()] if isinstance(v, dict) else [(k, v)]
    return ["### Compile times (the cache folder's compile_times.json: the last compile of each graph)", "",
            *table(["graph", "seconds"], [[k, v if not isinstance(v, float) else f"{v:.1f}"] for k, v in flat]), ""]


def pages_md(p: dict | None) -> list[str]:
    if not p:
        return []
    bad = [x for x in p["rows"] if x["problems"] or x.get("not_run")]
    return ["### Every page through AppTest, buttons pressed", "",
            f"{len(p['rows'])} page runs ({', '.join(p.get('modes', []))}; {p.get('jobs')} processes at once, "
            f"{p.get('limit_s')} s each), {sum(len(x.get('buttons_pressed', [])) for x in p['rows'])} buttons "
            f"pressed; {len(bad)} with a problem or not run.",
            *[f"- {x['page']} ({x['mode']}): {x.get('not_run') or '; '.join(x['problems'])[:400]}" for x in bad], ""]


def invariants_md(every: dict) -> list[str]:
    checks = [c for g in ("eager", "compiled") for c in (every.get(f"invariants-{g}") or {}).get("checks", [])]
    if not checks:
        return []
    return ["### Invariants on the real weights (scripts/gpu_invariants.py)", "",
            *[f"- {'PASS' if c['ok'] else 'FAIL'} {c['check']}: {c['detail'][:200]}" for c in checks], ""]


def steps_md(steps: dict, d: Path) -> list[str]:
    rows = [[n, s["phase"], s["limit_s"], s["seconds"], s["status"], s["reason"][:200]] for n, s in steps.items()]
    logs = [text(d, f"{n}.log") for n in steps]
    skips = sorted({m.group(0)[:200] for log in logs for m in SKIP_LINE.finditer(log)})
    # the first skip with its stack ("Found from"): where the mutated input comes from
    found = next((log[m.start():].splitlines()[:14] for log in logs for m in SKIP_LINE.finditer(log)
                  if "Found from" in log[m.start():m.start() + 2000]), [])
    return ["### The checks: limits, times, how each ended", "",
            *table(["check", "phase", "limit s", "took s", "status", "reason"], rows), "",
            "CUDA graph skips inductor reported (TORCH_LOGS=perf_hints): "
            + ("; ".join(f"`{s}`" for s in skips) if skips else "none") + ".", "",
            *(["```", *found, "```", ""] if found else [])]


def report(d: Path) -> tuple[str, dict]:
    skip = {"steps", "compile_times"}
    every = {p.stem: load(d, p.name) for p in sorted(d.glob("*.json")) if p.stem not in skip}
    steps = steps_of(d)
    goals = goal_rows(every, steps)
    count = {v: sum(g.verdict == v for g in goals) for v in (MET, MISSED, NOT_MEASURED)}
    lines = [f"## Measured by scripts/gpu_check.sh on {datetime.date.today().isoformat()}", "", "```",
             text(d, "machine.txt"), "```", "",
             "### Goals of issues 50 and 51", "",
             f"{count[MET]} met, {count[MISSED]} missed, {count[NOT_MEASURED]} not measured. A goal is *not measured* "
             "when the check that measures it did not finish within its limit, failed, was left for lack of time in "
             f"the call, or measured it from fewer than 5 runs; the row says which.", "",
             *goals_md(goals), ""]
    prof = every.get("profile")
    for fn, arg in ((decode_md, (every, prof)), (profile_md, (prof,)), (race_md, (every.get("race"),)),
                    (class_md, (every,)), (sweep_md, (every.get("timeline"),)),
                    (precision_md, (every.get("precision"),)),
                    (compile_md, (load(d, "compile_times.json"),)), (pages_md, (every.get("pages"),)),
                    (invariants_md, (every,)), (steps_md, (steps, d))):
        try:
            lines += fn(*arg)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:  # a result of another shape
            lines += [f"### {fn.__name__[:-3]}: its result could not be read ({type(exc).__name__}: {str(exc)[:160]})",
                      ""]
    return "\n".join(lines), {"date": datetime.date.today().isoformat(), "machine": text(d, "machine.txt"),
                              "goals": [g.to_dict() for g in goals], "steps": steps, "results": every}


def main(results: str, md: str, js: str) -> int:
    body, every = report(Path(results))
    Path(md).write_text(body + "\n")
    Path(js).write_text(json.dumps(every, indent=1))
    print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
