"""Benchmark: prefill time vs prompt length, whole pass and the time inside the attention kernels.

The peer is the model itself at other lengths: what matters is how each time grows (growth exponent between
the two longest lengths: ~1 linear, ~2 quadratic), measured in the same run.
"""
from __future__ import annotations

from engine.attention import DEFAULT_LENGTHS
from engine.bench import Bench
from engine.core.loaded import LoadedModel

# `--mode compiled`: the command says this in one line and runs eager (engine/__main__.py)
EAGER_BECAUSE = ("prompt passes run eager in both modes (only the decode step is compiled)")


def add_arguments(p) -> None:
    p.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)), help="comma-separated token counts")
    p.add_argument("--repeats", type=int, default=3)


def run(lm: LoadedModel, args) -> dict:
    from engine.attention.analysis import fit_power, growth_exponent, measure_cost

    lengths = [int(x) for x in str(args.lengths).split(",") if x.strip()]
    pts = measure_cost(lm, lengths, args.repeats)
    ns = [p.tokens for p in pts]
    fwd = [p.forward_median for p in pts]
    att = [p.attention_median for p in pts]
    return {
        "model": lm.name, "repeats": args.repeats,
        "points": [{"tokens": p.tokens, "forward_s": list(p.forward_s), "attention_s": list(p.attention_s),
                    "forward_median_s": p.forward_median, "attention_median_s": p.attention_median} for p in pts],
        "forward_growth_exponent": growth_exponent(ns, fwd),
        "attention_growth_exponent": growth_exponent(ns, att),
        "attention_n2_scale": fit_power(ns, att, 2),
    }


def summary(r: dict) -> str:
    lines = [f"{'tokens':>7} {'forward ms':>11} {'attention ms':>13} {'share':>6}"]
    for p in r["points"]:
        f, a = p["forward_median_s"] * 1000, p["attention_median_s"] * 1000
        lines.append(f"{p['tokens']:>7} {f:>11.1f} {a:>13.2f} {a / f:>6.1%}")
    lines.append(f"growth exponent (last two lengths): forward {r['forward_growth_exponent']:.2f}, "
                 f"attention {r['attention_growth_exponent']:.2f}")
    return "\n".join(lines)


BENCH = Bench("attention", run, add_arguments, summary, eager_because=EAGER_BECAUSE)
