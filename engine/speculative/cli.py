"""The command `python -m engine race`: plain decoding vs speculative decoding on one prompt, warmed up and then
measured as the page measures it (engine.speculative.repeats.race_repeats): the median of several races, the shared
prefill out of the headline, identical work timed far apart flagged as noise."""
from __future__ import annotations

import sys
from dataclasses import asdict

from engine.cli_args import add_run_arguments, add_save_argument, bold, number, sampling_settings
from engine.speculative import MAX_K
from engine.settings import RACE_REPEATS

# The race's work is imported when it runs (cli below): torch and transformers take seconds, and --help needs neither.


def add_arguments(p) -> None:
    add_run_arguments(p, max_new_tokens=64)
    add_save_argument(p)
    p.add_argument("--drafter", default="lookup", help="lookup[:N | :M-N] | early-exit:L | model:NAME (model:self, "
                                                       "model:random:L, or a model sharing the target's tokenizer); "
                                                       "default: %(default)s")
    p.add_argument("--k", type=number(int, 1, MAX_K), default=4,
                   help=f"draft length per round, 1 to {MAX_K}; default: %(default)s")
    p.add_argument("--repeats", type=number(int, 1, 1000), default=None,
                   help="races timed after one warm-up race; the figures are their medians (default: "
                        f"ILE_RACE_REPEATS, {RACE_REPEATS.default} unless set, as the page; fewer than "
                        f"{RACE_REPEATS.default} are flagged as too few to teach from)")


def lane_texts(plain: str, speculative: str, how: str) -> str:
    """Both lanes' answers, each under its label and indented, so a text of several lines cannot read as the next
    lane's or as more numbers (the label is bold on a terminal only: redirected output gets no escape codes)."""
    def block(label: str, text: str) -> str:
        return f"\n{bold(label)}\n" + "".join(f"  {line}\n" for line in (text or "(no text)").splitlines() or [""])

    return block("plain lane's text:", plain) + block(f"speculative lane's text ({how}):", speculative)


def cli(lm, args, emit, save_race=None) -> int:
    """The race on ``lm``, printed by ``emit``; with ``--save``, written by ``save_race`` (engine.record.cli's, handed
    in by the command line: records stand above speculative decoding, which imports none of them)."""
    from engine.core.loaded import ModelLoadError
    from engine.core.prompt import PromptError, encode_prompt
    from engine.core.loop import warm_prefill
    from engine.core.prefill_buckets import bucket_graphs
    from engine.measure import noise
    from engine.speculative import MAX_K
    from engine.speculative.drafters import DrafterError, make_drafter
    from engine.speculative.repeats import default_repeats, race_repeats

    try:
        enc = encode_prompt(lm.tokenizer, args.prompt, not args.no_chat_template)
        drafter = make_drafter(lm, args.drafter)
    except (PromptError, DrafterError, ModelLoadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.repeats is None:
        args.repeats = default_repeats()
    s = sampling_settings(args)
    n = len(enc.ids)
    tokens = n + max(1, args.max_new_tokens)
    # compiled mode: the prompt's prefill bucket on each lane's static cache (the speculative lane's holds its last
    # padded verify pass too), compiled before any race is timed
    for _, t in bucket_graphs(lm, n, (tokens, tokens + min(max(args.k, 0), MAX_K) + 1)):
        warm_prefill(lm, n, t)
    with noise.calibrated() as cal:
        series = race_repeats(lm, list(enc.ids), args.drafter, args.k, s, max(1, args.max_new_tokens), args.seed,
                              args.repeats, drafter=drafter)
    r, wall, dec = series.shown, series.speedup, series.decode_speedup
    check = noise.check_speedup(wall.median, r.k, r.accepted, r.tokens_per_pass)
    d = r.to_dict()  # the run whose decode-only speedup is the median, with the medians beside it
    d["repeats"] = series.to_dict()
    d["calibration"] = asdict(cal.result)
    d["flags"] = list(series.flags + check.flags + cal.result.flags)
    d["plain"]["text"] = lm.tokenizer.decode(list(r.plain_ids))
    d["speculative"]["text"] = lm.tokenizer.decode(list(r.spec_ids))
    verdict = (f"x{dec.median:.2f} decode only (median of {series.n}, {dec.lo:.2f}-{dec.hi:.2f}), "
               f"x{wall.median:.2f} wall clock with one shared prefill of "
               f"{series.shared_prefill_seconds * 1000:.0f} ms "
               f"({wall.lo:.2f}-{wall.hi:.2f})"
               + ("; NOISE, not a result: see the warnings" if series.is_noise else ""))
    text = (f"{series.n} races after one warm-up race; the median one:\n"
            f"plain       {len(r.plain_ids)} tokens in {r.plain_seconds:.2f} s ({r.plain_tokens_per_second:.1f} tok/s)\n"
            f"speculative {len(r.spec_ids)} tokens in {r.spec_seconds:.2f} s ({r.spec_tokens_per_second:.1f} tok/s), "
            f"{r.drafter}, k={r.k}\n"
            f"acceptance rate {r.acceptance_rate:.2f}, {r.tokens_per_pass:.2f} tokens per target pass, "
            f"c = {r.c:.3f}\nmeasured speedup: {verdict}\n"
            f"(paper's formula: x{r.predicted.paper:.2f}; round by round with the measured verify cost: "
            f"x{r.predicted.as_run:.2f}); identical output: {r.identical}\n{cal.result.describe()}\n"
            + "".join(f"warning: {f}\n" for f in d["flags"])
            + lane_texts(d["plain"]["text"], d["speculative"]["text"], f"{r.drafter}, k={r.k}"))
    emit(args, d, text)
    if getattr(args, "save", None) and save_race is not None:
        return save_race(lm, r, check, args.prompt, enc, cal.result, args.save, "python -m engine race")
    return 0
