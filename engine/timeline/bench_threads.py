"""Benchmark: which CPU thread policy keeps a decode step steady when another program is busy.

Candidates: torch intra-op threads = cores or cores - 1, with OpenMP's waiting threads spinning ("active") or
sleeping ("passive"), and the policy's rule that small passes (a decode step) run on one thread, on or off
(``small_pass_rows``; engine/measure/threads.py). ``OMP_WAIT_POLICY`` is read once, when torch loads its OpenMP runtime, so every candidate
runs in a fresh subprocess with the environment set before ``import torch``. Inside that subprocess the
embedded model decodes one token at a time, alternating quiet and busy phases (quiet, busy, quiet, busy ...),
so slow drift of a shared machine hits both alike. A busy phase starts a background load that ends by itself:

- ``spin``: one Python process running a busy loop (one core taken, as a browser drawing or a video call does);
- ``torch``: a second torch process doing matrix multiplies on its default threads (a second engine).

The figure per candidate is the ratio busy / quiet of the median decode step measured in the same subprocess.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import engine.settings as settings
from engine.measure.busy import LOADS, start_load, stop_load

# `--mode compiled`: the command says this in one line and runs eager (engine/__main__.py)
EAGER_ONLY = ("this benchmark varies the thread count, which compiled CPU kernels fix when they are built")

def candidates(cores: int) -> list[dict]:
    from engine.measure.threads import SMALL_PASS_ROWS

    counts = sorted({max(1, cores), max(1, cores - 1)}, reverse=True)
    out = []
    for n in counts:
        for w in ("active", "passive"):
            out.append({"threads": n, "wait": w, "small_pass_rows": 0})
            if n > 1 and w == "passive":  # on one thread the rule changes nothing
                out.append({"threads": n, "wait": w, "small_pass_rows": SMALL_PASS_ROWS})
    return out


def add_arguments(p) -> None:
    p.add_argument("--steps", type=int, default=16, help="decode steps per phase")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the candidates (one quiet/busy pair per load each)")
    p.add_argument("--loads", default=",".join(LOADS), help="comma-separated: spin, torch")
    p.add_argument("--precision", default="float32", help="the model's precision in every candidate (float32, int8, ...)")


def _child(threads: int, model: str, steps: int, rounds: int, loads: list[str], precision: str = "float32") -> dict:
    """Runs in the fresh subprocess: decode steps of the model, quiet and busy, alternating."""
    import torch

    from engine.core.loop import timed_greedy, warm_up
    from engine.models.loading import load_model
    from engine.core.prompt import encode_prompt
    from engine.measure.threads import small_pass_rows

    torch.set_num_threads(threads)
    lm = load_model(model, progress=lambda *a, **k: None, precision=precision)
    warm_up(lm)
    ids = list(encode_prompt(lm.tokenizer, "Explain in two sentences why the sky is blue.", True).ids)

    def phase() -> list[float]:
        _, _, times = timed_greedy(lm, ids, steps + 3)  # steps + 2 decode steps after the prefill
        return times[2:]  # the first two steps after a prefill are warm-up

    phase()
    out = {}
    for kind in loads:
        quiet, busy = [], []
        for _ in range(rounds):
            quiet += phase()
            proc = start_load(kind, 60)
            time.sleep(0.3)  # let the load get going
            try:
                busy += phase()
            finally:
                stop_load(proc)
            time.sleep(0.2)
        out[kind] = {"quiet_s": quiet, "busy_s": busy}
    return {"threads": torch.get_num_threads(), "wait": (settings.OMP_WAIT_POLICY.raw() or "").lower(),
            "small_pass_rows": small_pass_rows(), **out}


def _figures(quiet: list[float], busy: list[float]) -> dict:
    q, b = statistics.median(quiet), statistics.median(busy)
    return {"quiet_ms": q * 1000, "busy_ms": b * 1000, "ratio": b / q,
            "quiet_range_ms": [min(quiet) * 1000, max(quiet) * 1000],
            "busy_range_ms": [min(busy) * 1000, max(busy) * 1000], "steps": [len(quiet), len(busy)]}


def measure_candidate(cand: dict, model: str, steps: int, rounds: int, loads: list[str],
                      precision: str = "float32") -> dict:
    env = dict(os.environ, OMP_WAIT_POLICY=cand["wait"].upper(), ILE_THREAD_POLICY="off",
               ILE_SMALL_PASS_ROWS=str(cand.get("small_pass_rows", 0)))
    code = (f"import json, sys; from engine.timeline.bench_threads import _child; "
            f"print(json.dumps(_child({cand['threads']}, {model!r}, {steps}, {rounds}, {loads!r}, {precision!r})))")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True,
                         timeout=900)
    if res.returncode != 0:
        raise RuntimeError(f"candidate {cand} failed: {res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def run(lm, args) -> dict:
    """Round robin over the candidates (one subprocess per candidate per round), so a shared machine's slow
    drift spreads over all of them instead of falling on whichever ran last."""
    loads = [x.strip() for x in args.loads.split(",") if x.strip() in LOADS]
    cores = os.cpu_count() or 1
    cands = candidates(cores)
    raw = [{k: ([], []) for k in loads} for _ in cands]
    loadavg = []
    for _ in range(args.rounds):
        for i, c in enumerate(cands):
            loadavg.append(os.getloadavg()[0])
            got = measure_candidate(c, lm.ref.name, args.steps, 1, loads, args.precision)
            for k in loads:
                raw[i][k][0].extend(got[k]["quiet_s"])
                raw[i][k][1].extend(got[k]["busy_s"])
    rows = [{**c, **{k: _figures(*raw[i][k]) for k in loads}} for i, c in enumerate(cands)]
    for r in rows:
        r["worst_ratio"] = max(r[k]["ratio"] for k in loads)
        r["worst_busy_ms"] = max(r[k]["busy_ms"] for k in loads)
    best = min(rows, key=lambda r: r["worst_busy_ms"])
    return {"benchmark": "threads", "model": lm.info.name, "precision": args.precision, "cores": cores,
            "loads": loads, "steps": args.steps, "rounds": args.rounds, "candidates": rows,
            "load_average_1min": {"min": min(loadavg), "max": max(loadavg)},
            "best": {"threads": best["threads"], "wait": best["wait"], "small_pass_rows": best["small_pass_rows"]},
            "note": "median decode step of the model per candidate, quiet vs under a background load, alternating "
                    "in one subprocess per candidate; best = lowest worst-case busy step"}


def summary(r: dict) -> str:
    la = r.get("load_average_1min", {})
    lines = [f"{r.get('precision', 'float32')} model, {r['cores']} cores, loads: {', '.join(r['loads'])}; 1-min load average during the run "
             f"{la.get('min', float('nan')):.1f}-{la.get('max', float('nan')):.1f}"]
    for c in r["candidates"]:
        parts = [f"{k}: quiet {c[k]['quiet_ms']:.1f} ms, busy {c[k]['busy_ms']:.1f} ms (x{c[k]['ratio']:.2f})"
                 for k in r["loads"]]
        lines.append(f"threads={c['threads']} wait={c['wait']:<7} small passes on 1 thread: "
                     f"{'<= ' + str(c.get('small_pass_rows')) + ' rows' if c.get('small_pass_rows') else 'no':<12} "
                     + "; ".join(parts))
    b = r["best"]
    lines.append(f"best: threads={b['threads']} wait={b['wait']} small_pass_rows={b.get('small_pass_rows', 0)}")
    return "\n".join(lines)
