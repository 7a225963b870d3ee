"""``python -m engine serve-bench``: a serving engine measured from outside, for the terminal.

One request's timeline, a concurrency sweep (and optionally a prompt-length sweep), the next-token distribution
when the server returns logprobs, and what its /metrics offers. No local model is loaded."""
from __future__ import annotations

import argparse
import math
import sys

from engine.serving import config as K
from engine.serving import errors as E
from engine.serving import concurrency as Co
from engine.serving import measure as Me
from engine.serving import metrics as M
from engine.serving.probe import probe


def _int_list(text: str, lo: int, hi: int, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be whole numbers separated by commas, e.g. 1,2,4,8") from None
    if not vals or any(v < lo or v > hi for v in vals):
        raise argparse.ArgumentTypeError(f"{what} must each be between {lo} and {hi}")
    return sorted(set(vals))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", required=True, help="the server's root, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", default="", help="model name as the server lists it under /v1/models")
    p.add_argument("--api-key", default=None, help="API key (default: $OPENAI_API_KEY, if set)")
    p.add_argument("--api", choices=("completions", "chat"), default="completions",
                   help="/v1/completions (raw prompt, default) or /v1/chat/completions")
    p.add_argument("--concurrency", type=lambda s: _int_list(s, 1, Me.MAX_CONCURRENCY, "--concurrency"),
                   default=[1, 2, 4, 8], help=f"parallel requests per level (each 1..{Me.MAX_CONCURRENCY})")
    p.add_argument("--prompt-lengths", type=lambda s: _int_list(s, 4, Me.MAX_PROMPT_TOKENS, "--prompt-lengths"),
                   default=None, help="also run a prompt-length sweep at these lengths (tokens), e.g. 16,64,256")
    p.add_argument("--new-tokens", type=int, default=32, help="tokens each request generates (2..256)")
    p.add_argument("--prompt-tokens", type=int, default=64, help="prompt length for the concurrency sweep")
    p.add_argument("--top-logprobs", type=int, default=5, help="next-token distribution size (0 = skip)")
    p.add_argument("--target-ms", type=float, default=100.0,
                   help="capacity verdict: how many users at once get a time per token under this (ms, p90)")
    p.add_argument("--timeout", type=float, default=60.0, help="longest silence from the server (s)")
    p.add_argument("--json", action="store_true", help="print JSON")


def run(args) -> dict:
    from engine.settings import OPENAI_API_KEY

    key = args.api_key if args.api_key is not None else OPENAI_API_KEY.get()
    cfg = K.ServerConfig(args.base_url, args.model, key, read_timeout_s=float(args.timeout), api=args.api)
    info = probe(cfg)
    out: dict = {"server": cfg.to_dict(), "probe": info.to_dict()}
    Me.measure_request(cfg, Me.unique_prompt(16, "warm-up"), 2)  # a first request can pay one-time costs
    one = Me.measure_request(cfg, Me.unique_prompt(args.prompt_tokens, "single"), args.new_tokens)
    out["timeline"] = one.to_dict()
    if args.top_logprobs > 0:
        try:
            nt = Me.next_token(cfg, "The capital of France is", args.top_logprobs)
            out["next_token"] = nt.to_dict()
        except E.NoLogprobs as exc:
            out["next_token"] = {"error": str(exc)}
    if args.prompt_lengths:
        out["prompt_sweep"] = Me.prompt_sweep(cfg, args.prompt_lengths, args.new_tokens, 2).to_dict()
    cs = Co.concurrency_sweep(cfg, args.concurrency, args.new_tokens, args.prompt_tokens)
    out["concurrency_sweep"] = cs.to_dict()
    out["verdict"] = Co.batching_verdict(cs.levels)
    cap = Co.capacity(cs.levels, args.target_ms)
    out["capacity"] = {"target_ms": cap.target_ms, "users": cap.users, "tried": cap.tried,
                       "p90_ms": {str(k): v for k, v in cap.p90_ms.items()}, "reason": cap.reason,
                       "text": cap.text.replace("**", "")}
    out["spec_decode"] = M.spec_delta(cs.metrics_before, cs.metrics_after) or M.timings_spec(
        [r for lv in cs.levels for r in lv.requests])
    return out


def _f(x, fmt=".1f", unit=""):
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:{fmt}}{unit}"


def summary(r: dict) -> str:
    p, t = r["probe"], r["timeline"]
    lines = [f"server {p['base_url']} ({p['engine'] or 'engine unknown'}), models: {', '.join(p['models']) or 'none'}"]
    lines += [f"  note: {n}" for n in p["notes"]]
    lines.append(f"one request: TTFT {_f(t['ttft_s'] * 1000, '.0f')} ms, {t['completion_tokens']} tokens "
                 f"({t['token_source']}) in {t['chunks']} chunks, TPOT {_f(t['tpot_s'] * 1000, '.1f')} ms, "
                 f"decode {_f(t['decode_tok_s'])} tokens/s")
    nt = r.get("next_token")
    if nt and "error" not in nt:
        lines.append("next token: " + ", ".join(f"{tok!r} {pr:.1%}" for tok, pr in zip(nt["tokens"], nt["probs"])))
    elif nt:
        lines.append(f"next token: {nt['error']}")
    if "prompt_sweep" in r:
        lines.append("prompt tokens  TTFT ms  TPOT ms")
        for pt in r["prompt_sweep"]["points"]:
            lines.append(f"{_f(pt['prompt_tokens'], 'd') if pt['prompt_tokens'] else pt['target_tokens']:>13}  "
                         f"{_f(pt['ttft_s']['median'] * 1000, '.0f'):>7}  {_f(pt['tpot_s']['median'] * 1000, '.1f'):>7}")
        lines += [f"  flag: {f}" for f in r["prompt_sweep"]["flags"]]
    cs = r["concurrency_sweep"]
    lines.append("parallel  throughput tok/s  latency s (median)  TTFT ms  TPOT ms  KV usage (max)")
    for lv in cs["levels"]:
        kv = [m["kv_usage"] for m in lv["metrics"] if m["kv_usage"] is not None]  # /metrics gauge or /slots
        lines.append(f"{lv['concurrency']:>8}  {_f(lv['throughput_tok_s']):>16}  {_f(lv['latency_s']['median'], '.2f'):>18}"
                     f"  {_f(lv['ttft_s']['median'] * 1000, '.0f'):>7}  {_f(lv['tpot_s']['median'] * 1000, '.1f'):>7}"
                     f"  {_f(max(kv) * 100, '.1f', ' %') if kv else 'missing':>14}")
    lines += [f"  flag: {f}" for f in cs["flags"]]
    lines.append(r["verdict"])
    lines.append(r["capacity"]["text"])
    sd = r.get("spec_decode")
    lines.append("speculative decoding: " + (", ".join(f"{k} {_f(v, '.3g')}" for k, v in sd.items()) if sd
                                             else "the server reports no drafted/accepted counters"))
    return "\n".join(lines)


def cli(argv_args, emit) -> int:
    try:
        result = run(argv_args)
    except E.ServingError as exc:
        print(f"error ({exc.kind}): {exc}", file=sys.stderr)
        return 2
    emit(argv_args, result, summary(result))
    return 0
