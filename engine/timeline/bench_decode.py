"""Benchmark: the engine's greedy decode loop vs ``model.generate``, or (``--modes``) the engine modes.

On the same model and prompts; with ``--modes eager,compiled``, the engine modes against each other and against
the bandwidth floor.

Both produce the same number of tokens (end-of-sequence ignored), greedy, with a KV cache. Runs alternate
(engine, generate, engine, ...) after a warm-up, so slow drift of a shared machine hits both alike; the
figure that matters is the ratio of tokens/s measured in this one run.

``--modes``: per mode, the median decode step (ms per token, each step timed after a device sync), tokens/s =
1000 / that, the ratio to eager's tokens/s, how close the step is to the floor (weight bytes one step reads /
the measured read bandwidth), ``same_tokens`` (greedy tokens identical to eager's on every prompt), the
seconds its warm-up took (compiling, for compiled mode: never inside a timed step), and the same decode run with no
one watching token by token (``unwatched_ms_per_token``: compiled, the ids stay on the device between reads).
"""
from __future__ import annotations

import statistics

from engine.bench import Bench
from engine.core.loaded import DEFAULT_MODE, MODES, LoadedModel
from engine.core.prompt import encode_prompt

# The loop, transformers and torch are imported by the functions that time (``bench decode --help`` needs none).

PEERS = ("transformers",)  # --peer: transformers' own fast decode recipe (engine/timeline/bench_peer.py)
PROMPTS = [
    "The capital of France is",
    "Explain in two sentences why the sky is blue.",
    "Write a short Python function that reverses a string.",
]


def add_arguments(p) -> None:
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--modes", default="", help=f"comma-separated engine modes to compare ({','.join(MODES)}): "
                                               "tokens/s, ratio to eager, the bandwidth floor and same_tokens; "
                                               "without it, the engine against model.generate")
    p.add_argument("--probe-mb", type=int, default=256, help="buffer size of the bandwidth probe (MiB), --modes")
    p.add_argument("--peer", default="", help=f"with --modes, also measure a peer in the same run ({', '.join(PEERS)}: "
                                              "its static cache + torch.compile through model.generate)")


def _time_engine(lm, ids, n, record):
    from engine.core.sampling import SamplingSettings
    from engine.core.trace import generate_tokens
    from engine.measure.timing import now

    t0 = now(lm.device)
    out, *_ = generate_tokens(lm, ids, SamplingSettings(), n, seed=0, stop_at_eos=False, record=record)
    return now(lm.device) - t0, out


def _time_generate(lm, ids, n):
    from transformers import GenerationConfig

    from engine.measure.timing import timed_generate

    # generate() fills fields left as None from the model's own generation_config (so EOS would come back); an
    # empty EOS list is "set" and stops nothing, and the shared model's generation_config is never edited.
    # min_new_tokens is not used because it masks EOS out of the argmax (changing tokens).
    cfg = GenerationConfig(max_new_tokens=n, do_sample=False, pad_token_id=lm.tokenizer.pad_token_id, eos_token_id=[])
    seconds, out = timed_generate(lm, ids, cfg)
    assert len(out) == n, f"generate produced {len(out)} tokens, expected {n}"
    return seconds, out


def run(lm: LoadedModel, args) -> dict:
    if str(getattr(args, "modes", "") or "").strip():
        return run_modes(lm, args)
    import torch

    from engine.core.loop import warm_up

    n, repeats = args.new_tokens, args.repeats
    warm_up(lm)
    rows = []
    for prompt in PROMPTS:
        ids = list(encode_prompt(lm.tokenizer, prompt, use_chat_template=False).ids)
        _time_engine(lm, ids, 4, True), _time_generate(lm, ids, 4)  # per-prompt warm-up
        eng, gen, rec = [], [], []
        for _ in range(repeats):
            t, out_e = _time_engine(lm, ids, n, record=False)
            eng.append(t)
            t, out_r = _time_engine(lm, ids, n, record=True)
            rec.append(t)
            t, out_g = _time_generate(lm, ids, n)
            gen.append(t)
        rows.append({
            "prompt": prompt, "prompt_tokens": len(ids), "new_tokens": n,
            "engine_tokens_per_s": n / statistics.median(eng),
            "engine_instrumented_tokens_per_s": n / statistics.median(rec),
            "generate_tokens_per_s": n / statistics.median(gen),
            "same_tokens": out_e == out_g == out_r,
        })
    tot = lambda key: sum(r["new_tokens"] for r in rows) / sum(r["new_tokens"] / r[key] for r in rows)  # noqa: E731
    eng, inst, gen = tot("engine_tokens_per_s"), tot("engine_instrumented_tokens_per_s"), tot("generate_tokens_per_s")
    return {
        "benchmark": "decode", "model": lm.name, "device": lm.info.device, "dtype": lm.info.dtype,
        "threads": torch.get_num_threads(), "prompts": rows,
        "engine_tokens_per_s": eng, "engine_instrumented_tokens_per_s": inst, "generate_tokens_per_s": gen,
        "ratio_engine_vs_generate": eng / gen, "ratio_instrumented_vs_generate": inst / gen,
        "note": "greedy, KV cache on, EOS ignored; medians of repeats, alternating runs; ratio >= 1 means the "
                "engine is at least as fast as model.generate",
    }


def in_modes(lm: LoadedModel, names: list[str]) -> tuple[dict, dict]:
    """The model in each mode asked for (eager always, first), and the one-line refusal of each that cannot run."""
    from engine.core.compiled import ModeError, to_mode

    eager = to_mode(lm, DEFAULT_MODE)
    models, refused = {DEFAULT_MODE: eager}, {}
    for m in names:
        if m == DEFAULT_MODE:
            continue
        try:
            models[m] = to_mode(eager, m)
        except ModeError as exc:
            refused[m] = str(exc)
    return models, refused


def run_modes(lm: LoadedModel, args) -> dict:
    """Each engine mode's decode speed on the same prompts, alternating modes within every repeat."""
    import torch

    from engine.core.compiled import graph_of, inductor_knobs, mode_of
    from engine.core.loop import timed_greedy
    from engine.core.unwatched import timed_unwatched
    from engine.measure.timing import now
    from engine.models.precision import decode_weight_bytes
    from engine.timeline.bench_peer import TransformersPeer
    from engine.timeline.roofline import hardware_probe

    names = [m.strip() for m in str(args.modes).split(",") if m.strip()]
    unknown = [m for m in names if m not in MODES]
    if unknown:
        raise SystemExit(f"error: unknown engine mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    peer_name = str(getattr(args, "peer", "") or "").strip()
    if peer_name and peer_name not in PEERS:
        raise SystemExit(f"error: unknown peer {peer_name[:40]!r}; choose from {', '.join(PEERS)}")
    models, refused = in_modes(lm, names)
    n, repeats = max(2, int(args.new_tokens)), max(1, int(args.repeats))
    longest = max(len(encode_prompt(lm.tokenizer, p, use_chat_template=False).ids) for p in PROMPTS) + n
    peer = TransformersPeer(models[DEFAULT_MODE], longest) if peer_name else None
    peer_same = True
    steps: dict[str, list[float]] = {m: [] for m in models}
    unwatched: dict[str, list[float]] = {m: [] for m in models}  # ms per token of a decode no one watches
    reads: dict[str, list[float]] = {m: [] for m in models}  # its reads of ids from the device, per token
    walls: dict[str, list[float]] = {m: [] for m in models}
    same = {m: True for m in models}
    served = {m: True for m in models}
    for prompt in PROMPTS:
        ids = list(encode_prompt(lm.tokenizer, prompt, use_chat_template=False).ids)
        # warm-up, untimed: compiled mode compiles its graph for this length here; eager's tokens are the reference
        ref = timed_greedy(models[DEFAULT_MODE], ids, n)[0]
        for mlm in models.values():
            timed_greedy(mlm, ids, n)
        if peer is not None:
            peer.warm_up(ids, n)
        for _ in range(repeats):
            for m, mlm in models.items():
                t0 = now(lm.device)
                out, _, st = timed_greedy(mlm, ids, n)
                walls[m].append(now(lm.device) - t0)
                steps[m].extend(x * 1000.0 for x in st)  # ms
                same[m] = same[m] and out == ref
                out, seconds, how = timed_unwatched(mlm, ids, n)
                unwatched[m].append(seconds * 1000.0 / (n - 1))
                reads[m].append(how.reads / (n - 1))
                same[m] = same[m] and out == ref
                g = graph_of(mlm)
                served[m] = served[m] and (g is None or g.ready(len(ids) + n))
            if peer is not None:
                peer_same = peer.time(ids, n) == ref and peer_same
    kernels = {m: _kernels(mlm, ids) for m, mlm in models.items()}
    probe = hardware_probe(lm.device, buffer_mb=args.probe_mb)
    floor_ms = decode_weight_bytes(lm.model) / (probe.read_gb_s.median * 1e9) * 1000.0
    eager_tps = 1000.0 / statistics.median(steps[DEFAULT_MODE])
    rows = {}
    for m, mlm in models.items():
        ms = statistics.median(steps[m])
        g = graph_of(mlm)
        rows[m] = {
            "decode_ms_per_token": ms, "decode_ms_min": min(steps[m]), "decode_ms_max": max(steps[m]),
            "tokens_per_s": 1000.0 / ms, "ratio_to_eager": (1000.0 / ms) / eager_tps,
            "end_to_end_tokens_per_s": n * len(walls[m]) / sum(walls[m]),
            "unwatched_ms_per_token": statistics.median(unwatched[m]),
            "unwatched_ms_spread": [min(unwatched[m]), max(unwatched[m])],
            "unwatched_reads_per_token": statistics.median(reads[m]),
            "of_floor": floor_ms / ms, "same_tokens": same[m], **kernels[m],
            "ran_as": mode_of(mlm) if served[m] and (g is None or not g.failure) else DEFAULT_MODE,
            "warm_up_s": dict(sorted(g.compile_s.items())) if g is not None else {},
            **({"failure": g.failure} if g is not None and g.failure else {}),
            **({"fusion": g.fusion.describe()} if g is not None and g.fusion is not None else {}),
        }
    peers = {peer_name: {**peer.row(1000.0 / eager_tps), "same_tokens": peer_same}} if peer is not None else {}
    return {
        "benchmark": "decode", "model": lm.name, "device": lm.info.device, "dtype": lm.info.dtype,
        "threads": torch.get_num_threads(), "new_tokens": n, "repeats": repeats, "prompts": len(PROMPTS),
        "modes": rows, "refused": refused, "peers": peers, "inductor_knobs": sorted(inductor_knobs()),
        "decode_weight_bytes": decode_weight_bytes(lm.model), "read_gb_s": probe.read_gb_s.median,
        "floor_ms_per_token": floor_ms, "floor_tokens_per_s": 1000.0 / floor_ms,
        "note": "greedy, EOS ignored; decode_ms_per_token = median decode step over every prompt and repeat, each "
                "timed after a device sync, modes alternating; tokens_per_s = 1000 / that; ratio_to_eager = tokens/s "
                "/ eager's (this run); floor = weight bytes one step reads / measured read bandwidth (derived); "
                "of_floor = floor / measured step; same_tokens: greedy tokens equal to eager's on every prompt; "
                "warm_up_s: seconds each static cache length's warm-up took (compiled: the compile), never timed; "
                "kernels_per_step: kernels (GPU) or operators (CPU) of one decode step, counted in one profiled step "
                "(engine.timeline.profile), by kind and per layer (by kind / blocks, derived); peers: measured in this "
                "run, their decode step derived as bench_peer says; unwatched_ms_per_token: the decode of a run no one "
                "watches token by token (engine.core.unwatched.decode_unwatched: compiled, the drawn ids stay on the "
                "device and are read once a chunk), its steps timed together, median over prompts and repeats "
                "(spread: min, max), with its reads of ids per token",
    }


def _kernels(mlm, ids) -> dict:
    """Kernels (operators on a CPU) of one decode step of ``mlm``, by kind and per layer: one profiled step."""
    from engine.timeline.profile import profile_steps

    _, dec = profile_steps(mlm, ids, repeats=1)
    return {"kernels_per_step": dec.ops, "kernels_are": dec.op_word, "kernels_by_kind": dec.by_kind,
            "kernels_per_layer_by_kind": {k: round(v, 2) for k, v in dec.per_layer().items()}}


def summary(r: dict) -> str:
    if "modes" in r:
        lines = [f"{'mode':>12} {'ms/token':>9} {'tokens/s':>9} {'vs eager':>9} {'of floor':>9} {'kernels':>8}"
                 f" {'unwatched':>10}  same tokens"]
        for m, row in r["modes"].items():
            ran = "" if row["ran_as"] == m else f"  (ran {row['ran_as']}: {row.get('failure', 'too long')})"
            lines.append(f"{m:>12} {row['decode_ms_per_token']:>9.2f} {row['tokens_per_s']:>9.1f} "
                         f"{row['ratio_to_eager']:>8.2f}x {row['of_floor']:>9.0%} {row['kernels_per_step']:>8} "
                         f"{row['unwatched_ms_per_token']:>10.2f}  {row['same_tokens']}{ran}")
            kinds = ", ".join(f"{k} {v}" for k, v in row["kernels_by_kind"].items())
            lines.append(f"{'':>12} {row['kernels_are']} per step by kind: {kinds}")
        for name, row in r.get("peers", {}).items():
            if row["decode_ms_per_token"] is None:
                lines.append(f"{name:>12} {row['flag']}  (peer, derived)")
                continue
            lines.append(f"{name:>12} {row['decode_ms_per_token']:>9.2f} {row['tokens_per_s']:>9.1f} "
                         f"{row['ratio_to_eager']:>8.2f}x {'':>9} {'':>8}  {row['same_tokens']}  (peer, derived)")
        lines.append(f"{'floor':>9} {r['floor_ms_per_token']:>9.2f} {r['floor_tokens_per_s']:>9.1f}  "
                     f"({r['decode_weight_bytes'] / 1e6:,.0f} MB of weights at {r['read_gb_s']:.1f} GB/s)")
        lines += [f"refused: {why}" for why in r["refused"].values()]
        if r.get("inductor_knobs"):
            lines.append(f"inductor options on (ILE_INDUCTOR_KNOBS): {', '.join(r['inductor_knobs'])}")
        return "\n".join(lines)
    return (f"engine {r['engine_tokens_per_s']:.1f} tok/s (instrumented {r['engine_instrumented_tokens_per_s']:.1f}), "
            f"generate {r['generate_tokens_per_s']:.1f} tok/s, ratio {r['ratio_engine_vs_generate']:.2f} "
            f"(instrumented {r['ratio_instrumented_vs_generate']:.2f})")


BENCH = Bench("decode", run, add_arguments, summary)
