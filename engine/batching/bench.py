"""Benchmark: batched decoding (tokens/s and step time by batch size) and static vs continuous batching.

Every number comes from real forward passes in this run; ratios (batch B vs batch 1, continuous vs static)
are what to compare, since the machine may be shared. The request trace is generated from a seed (Poisson
arrivals): the arrivals are synthetic, the serving is real.
"""
from __future__ import annotations

from dataclasses import asdict

from engine.batching import EAGER_BECAUSE
from engine.bench import Bench
from engine.core.loaded import LoadedModel

# The serving (torch) is imported when the benchmark runs: ``bench batching --help`` needs no torch.


def _ints(text: str) -> list[int]:
    return [int(x) for x in str(text).split(",") if x.strip()]


def add_arguments(p) -> None:
    p.add_argument("--batch-sizes", default="1,2,4,8,16", help="comma-separated batch sizes for the decode sweep")
    p.add_argument("--steps", type=int, default=6, help="timed decode steps per batch size")
    p.add_argument("--warmup", type=int, default=2, help="untimed decode steps per batch size")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--rate", type=float, default=4.0, help="mean arrivals per second")
    p.add_argument("--min-new", type=int, default=4)
    p.add_argument("--max-new", type=int, default=24)
    p.add_argument("--max-batch", type=int, default=4)
    p.add_argument("--timeout", type=float, default=0.5, help="static batching: longest wait for a full batch (s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", action="store_true", help="also run every request alone and compare tokens")


def run(lm: LoadedModel, args) -> dict:
    from engine.batching.experiment import decode_sweep, serve, solo_tokens
    from engine.batching.workload import WorkloadSettings, make_workload

    sweep = decode_sweep(lm, _ints(args.batch_sizes), steps=args.steps, warmup=args.warmup)
    base = sweep[0]
    ws = WorkloadSettings(args.requests, args.rate, args.min_new, args.max_new, args.seed)
    reqs = make_workload(lm.tokenizer, ws)
    results = {p: serve(lm, reqs, p, args.max_batch, args.timeout) for p in ("static", "continuous")}
    m = {p: r.metrics() for p, r in results.items()}
    out = {
        "benchmark": "batching", "model": lm.name, "device": lm.info.device, "dtype": lm.info.dtype,
        "decode_sweep": [{"batch": p.batch, "median_step_ms": p.median_s * 1e3, "p10_step_ms": p.p10_s * 1e3,
                          "p90_step_ms": p.p90_s * 1e3, "tokens_per_s": p.tokens_per_s,
                          "speedup_vs_batch_1": p.tokens_per_s / base.tokens_per_s,
                          "step_time_vs_batch_1": p.median_s / base.median_s, "kv_bytes": p.kv_bytes}
                         for p in sweep],
        "workload": asdict(ws), "max_batch": args.max_batch, "batch_timeout_s": args.timeout,
        "static": m["static"], "continuous": m["continuous"],
        "throughput_ratio_continuous_vs_static": m["continuous"]["throughput_tok_s"] / m["static"]["throughput_tok_s"],
        "mean_latency_ratio_continuous_vs_static": m["continuous"]["mean_latency_s"] / m["static"]["mean_latency_s"],
        "every_request_got_its_tokens": all(len(r.token_ids) == r.max_new_tokens
                                            for res in results.values() for r in res.requests),
        "note": "greedy, end-of-sequence ignored; decode sweep: medians of timed steps after warm-up; serving: "
                "real forward passes on the wall clock, Poisson arrivals generated from the seed",
    }
    if args.check:
        solo = {r.rid: solo_tokens(lm, r) for r in reqs}
        out["same_tokens_as_alone"] = {p: all(list(r.token_ids) == solo[r.rid] for r in res.requests)
                                       for p, res in results.items()}
    return out


def summary(r: dict) -> str:
    lines = ["batch  step ms  tokens/s  x batch 1"]
    lines += [f"{p['batch']:5d}  {p['median_step_ms']:7.1f}  {p['tokens_per_s']:8.1f}  {p['speedup_vs_batch_1']:8.2f}"
              for p in r["decode_sweep"]]
    for pol in ("static", "continuous"):
        m = r[pol]
        lines.append(f"{pol:10s} {m['throughput_tok_s']:.1f} tok/s, mean latency {m['mean_latency_s']:.2f} s, "
                     f"p90 {m['p90_latency_s']:.2f} s, mean TTFT {m['mean_ttft_s']:.2f} s, "
                     f"wasted slots {m['wasted_decode_slots']}/{m['decode_slots']}")
    lines.append(f"continuous / static throughput: {r['throughput_ratio_continuous_vs_static']:.2f}")
    if "same_tokens_as_alone" in r:
        lines.append(f"same tokens as running alone: {r['same_tokens_as_alone']}")
    return "\n".join(lines)


BENCH = Bench("batching", run, add_arguments, summary, eager_because=EAGER_BECAUSE)
