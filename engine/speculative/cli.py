"""The command `python -m engine race`: plain decoding vs speculative decoding on one prompt, measured in one run
(engine.speculative.decoding.race)."""
from __future__ import annotations

import sys
from dataclasses import asdict

from engine.cli_args import add_run_arguments, number
from engine.record.cli import add_save_argument
from engine.speculative import MAX_K

# The race's work is imported when it runs (cli below): torch and transformers take seconds, and --help needs neither.


def add_arguments(p) -> None:
    add_run_arguments(p, max_new_tokens=64)
    add_save_argument(p)
    p.add_argument("--drafter", default="lookup", help="lookup[:N | :M-N] | early-exit:L | model:NAME (model:self, "
                                                       "model:random:L, or a model sharing the target's tokenizer); "
                                                       "default: %(default)s")
    p.add_argument("--k", type=number(int, 1, MAX_K), default=4,
                   help=f"draft length per round, 1 to {MAX_K}; default: %(default)s")


def eager_only() -> str:
    """Why ``--mode compiled`` runs the race eager (engine.speculative.decoding.EAGER_ONLY)."""
    from engine.speculative.decoding import EAGER_ONLY

    return EAGER_ONLY


def cli(lm, args, emit) -> int:
    from engine.core.loaded import ModelLoadError
    from engine.core.prompt import PromptError, encode_prompt
    from engine.core.sampling import SamplingSettings
    from engine.measure import noise
    from engine.speculative.decoding import race
    from engine.speculative.drafters import DrafterError, make_drafter

    try:
        enc = encode_prompt(lm.tokenizer, args.prompt, not args.no_chat_template)
        drafter = make_drafter(lm, args.drafter)
    except (PromptError, DrafterError, ModelLoadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    s = SamplingSettings(args.temperature, args.top_k, args.top_p, args.min_p)
    with noise.calibrated() as cal:
        r = race(lm, list(enc.ids), args.drafter, args.k, s, max(1, args.max_new_tokens), args.seed, drafter=drafter)
    check = noise.check_speedup(r.speedup, r.k, r.accepted, r.tokens_per_pass)
    d = r.to_dict()
    d["calibration"] = asdict(cal.result)
    d["flags"] = list(check.flags + cal.result.flags)
    d["plain"]["text"] = lm.tokenizer.decode(list(r.plain_ids))
    d["speculative"]["text"] = lm.tokenizer.decode(list(r.spec_ids))
    text = (f"plain       {len(r.plain_ids)} tokens in {r.plain_seconds:.2f} s ({r.plain_tokens_per_second:.1f} tok/s)\n"
            f"speculative {len(r.spec_ids)} tokens in {r.spec_seconds:.2f} s ({r.spec_tokens_per_second:.1f} tok/s), "
            f"{r.drafter}, k={r.k}\n"
            f"acceptance rate {r.acceptance_rate:.2f}, {r.tokens_per_pass:.2f} tokens per target pass, "
            f"c = {r.c:.3f}\nmeasured speedup x{r.speedup:.2f} wall clock, x{r.decode_speedup:.2f} decode only "
            f"(paper's formula: x{r.predicted.paper:.2f}; round by round with the measured verify cost: "
            f"x{r.predicted.as_run:.2f}); "
            f"identical output: {r.identical}\n{cal.result.describe()}\n"
            + "".join(f"warning: {f}\n" for f in d["flags"]) + f"\n{d['speculative']['text']}")
    emit(args, d, text)
    if getattr(args, "save", None):
        from engine.record.cli import save_race

        return save_race(lm, r, check, args.prompt, enc, cal.result, args.save, "python -m engine race")
    return 0
