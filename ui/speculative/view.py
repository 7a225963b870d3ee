"""The race as the page shows it: measured first with the page quiet, then replayed at the measured pace, and
read through the noise guard; then the display values of its summary, rounds and k sweep (texts from
assets/lessons/speculative.md). No st.* here except in ``replay`` (which only fills the placeholders it is given).

Why a replay: streaming one page update per token made the browser and the server draw while the plain lane
decoded (one update per token) but far less while the speculative lane did (one per round), so the plain lane
paid more and the page showed 3.3-3.8x where the command line measured 2.1-2.6x. Now neither lane draws
anything while it is measured; the clocks are the engine's, and the replay moves both lanes on the same frames.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from engine.measure import noise
from engine.speculative.records import SpecRun
from engine.speculative.repeats import RaceRepeats
from ui.frame.html import md_escape, visible
from ui.frame.lessons import lesson
from ui.speculative.figures import clock_html, lane_html

FPS = 12
MAX_REPLAY_S = 12.0  # a long race is replayed faster, both lanes by the same factor


@dataclass(frozen=True)
class RaceResult:
    """A race's runs with the conditions they were measured under and the headline judged against its bounds.
    ``run`` is the one the lanes replay (RaceRepeats.shown); ``check`` judges the median wall-clock speedup with one
    shared prefill (RaceRepeats.speedup)."""

    run: SpecRun
    calibration: noise.Calibration
    check: noise.SpeedupCheck
    repeats: RaceRepeats | None = None  # None: this one run alone (a lesson needs more: RaceRepeats.flags)

    @property
    def series(self) -> RaceRepeats:
        return self.repeats if self.repeats is not None else RaceRepeats((self.run,))

    @property
    def same_work(self) -> noise.SameWorkGap | None:
        """The lanes did identical work (nothing drafted): their clocks' gap, judged as noise; else None."""
        return noise.same_work_gap(self.run.plain_seconds, self.run.spec_seconds) if self.run.same_work else None

    @property
    def flags(self) -> tuple[str, ...]:
        return (self.check.flags + self.calibration.flags + self.series.flags
                + (self.same_work.flags if self.same_work else ()))


def plain_noise(run: SpecRun) -> float:
    """Relative spread (IQR / median) of the plain decode steps: how far a speedup may be noise."""
    r = noise.summarize(run.plain_step_seconds[1:])
    spread = r.relative_spread if r.n >= 4 else 0.1
    return float(min(max(spread, 0.05), 0.5)) if spread == spread else 0.1


def judge(measured: SpecRun | RaceRepeats, calibration: noise.Calibration) -> RaceResult:
    """The page's reading of a race: its median run to replay, and the median wall-clock speedup (one shared
    prefill) against its bounds. A single SpecRun is judged as a race of one run."""
    series = measured if isinstance(measured, RaceRepeats) else RaceRepeats((measured,))
    run = series.shown
    return RaceResult(run, calibration, noise.check_speedup(series.speedup.median, run.k, run.accepted,
                                                            run.tokens_per_pass, plain_noise(run)), series)


def schedule(run: SpecRun, spec_pieces: list[tuple[str, str]]):
    """When each piece of each lane appears, on the engine's clocks: (plain times, spec times) in seconds.
    A speculative round's pieces (accepted, rejected, the target's token) all appear when its verify ends."""
    plain_t = np.cumsum(run.plain_step_seconds).tolist()
    spec_t = [run.spec_prefill_seconds] if spec_pieces else []
    t = run.spec_prefill_seconds
    for rnd in run.rounds:
        t += rnd.draft_seconds + rnd.verify_seconds
        spec_t += [t] * (rnd.accepted + len(rnd.rejected) + 1)
    spec_t = (spec_t + [t] * len(spec_pieces))[: len(spec_pieces)]
    return plain_t, spec_t


def replay(run: SpecRun, plain_pieces, spec_pieces, plain_lane, plain_clock, spec_lane, spec_clock,
           sleep=time.sleep) -> float:
    """Both lanes drawn frame by frame at the measured pace (sped up alike when the race was long); every frame
    updates both lanes, so drawing costs them the same. Returns the speed-up factor of the replay."""
    plain_t, spec_t = schedule(run, spec_pieces)
    end = max(plain_t[-1] if plain_t else 0.0, spec_t[-1] if spec_t else 0.0)
    factor = max(1.0, end / MAX_REPLAY_S)
    frames = max(1, int(np.ceil(end / factor * FPS)))
    for f in range(1, frames + 1):
        now = min(end, f / FPS * factor)
        n_plain = int(np.searchsorted(plain_t, now, side="right"))
        n_spec = int(np.searchsorted(spec_t, now, side="right"))
        shown_spec = spec_pieces[:n_spec]
        plain_lane.html(lane_html(plain_pieces[:n_plain], cursor=n_plain < len(plain_pieces)))
        plain_clock.html(clock_html(min(now, plain_t[-1]) if plain_t else 0.0, n_plain, n_plain))
        spec_lane.html(lane_html(shown_spec, cursor=n_spec < len(spec_pieces)))
        passes = 1 + sum(1 for i, _ in enumerate(run.rounds) if _round_end(run, i) <= now) if n_spec else 0
        spec_clock.html(clock_html(min(now, spec_t[-1]) if spec_t else 0.0,
                                   sum(1 for _, role in shown_spec if role != "rejected"), passes))
        if f < frames:
            sleep(1.0 / FPS)
    return factor


def _round_end(run: SpecRun, i: int) -> float:
    return run.spec_prefill_seconds + sum(r.draft_seconds + r.verify_seconds for r in run.rounds[: i + 1])


# ------------------------------------------------------------------------------------------ display values


def drafts_little(run: SpecRun) -> bool:
    """The drafter proposed far fewer than k tokens per round (prompt lookup on an open prompt)."""
    return bool(run.rounds) and run.drafted_per_round < 0.5 * run.k


def _x(value: float) -> str:
    return f"{value:.2f}x" if value == value else "n/a"


def gap_rows(run: SpecRun, series: RaceRepeats | None = None) -> list[tuple[str, str, str]]:
    """(step, speedup, why) from the paper's formula to the wall clock, one assumption changed per line: rounds
    as they happened, the measured verify cost, then the measured decode-only and wall-clock speedups of ``run``
    (the wall clock with the one prefill ``series`` shares between the lanes). The formula's lines count decode
    rounds only, so the decode-only line is the one to compare them with."""
    series = series if series is not None else RaceRepeats((run,))
    rounds, k = len(run.rounds), run.k
    if run.rounds_with_drafts == rounds and run.drafted_per_round >= k:
        as_run = lesson("speculative", "gap every round", k=k)
    elif run.rounds_with_drafts == rounds:
        as_run = lesson("speculative", "gap short drafts", per_round=run.drafted_per_round, k=k)
    else:
        as_run = lesson("speculative", "gap few drafts", drafting=run.rounds_with_drafts, rounds=rounds,
                        per_round=run.drafted_per_round, k=k)
        if drafts_little(run):
            as_run += " " + lesson("speculative", "gap search cost", drafted=run.drafted, c=run.c)
    ratio = run.verify_cost_ratio
    verify = (lesson("speculative", "gap verify", ratio=ratio) if ratio == ratio
              else lesson("speculative", "gap no verify"))
    return [
        ("Paper's formula", _x(run.predicted.paper),
         lesson("speculative", "gap formula", a=run.acceptance_rate, c=run.c, k=k)),
        ("+ rounds as they happened", _x(run.predicted.rounds), as_run),
        ("+ measured verify cost", _x(run.predicted.as_run), verify),
        ("Measured, decode only", _x(run.decode_speedup),
         lesson("speculative", "gap decode", accepted=run.accepted, tested=run.tested)),
        ("Measured, wall clock", _x(series.wall_speedup(run)),
         lesson("speculative", "gap prefill", shared_ms=series.shared_prefill_seconds * 1000,
                measured=2 * series.n, plain_ms=run.plain_step_seconds[0] * 1000,
                spec_ms=run.spec_prefill_seconds * 1000)),
    ]


def gap_table(run: SpecRun, series: RaceRepeats | None = None) -> str:
    """The gap rows as a markdown table under their one-line heading."""
    lines = [lesson("speculative", "gap intro"), "", "| | speedup | what changed |", "|---|---:|---|"]
    lines += [f"| {step} | **{value}** | {' '.join(why.split())} |" for step, value, why in gap_rows(run, series)]
    return "\n".join(lines)


def decode_check(result: RaceResult) -> noise.SpeedupCheck:
    """The median decode-only speedup judged against the same bounds (k + 1, tokens per target pass)."""
    run = result.run
    return noise.check_speedup(result.series.decode_speedup.median, run.k, run.accepted, run.tokens_per_pass,
                               plain_noise(run))


def decode_flags(result: RaceResult) -> tuple[str, ...]:
    """Bound checks of the decode-only speedup that the wall-clock checks did not already say."""
    run = result.run
    if not run.measurable or result.series.decode_speedup.median != result.series.decode_speedup.median:
        return ()
    return tuple(f"Decode only: {f}" for f in decode_check(result).flags if f not in result.check.flags)


def self_draft_answer(result: RaceResult | None) -> str:
    """The 'Try this' answer about model:self, checked against this session's own run of it when there is one."""
    answer = lesson("speculative", "answer self")
    if result is None or result.run.drafter != f"model:{result.run.model}":  # model:self is named after the target
        return answer
    check, speedup = result.check, result.series.decode_speedup.median
    if result.series.is_noise:
        return answer + "\n\n" + lesson("speculative", "answer self noise")
    if speedup < 1.0:
        return answer + "\n\n" + lesson("speculative", "answer self agrees", speedup=speedup)
    why = lesson("speculative", "why busy" if result.calibration.disturbed else
                 "why noise" if check.no_gain else "why one lane")
    return answer + "\n\n" + lesson("speculative", "answer self differs", speedup=speedup, why=why)


def _spread(s) -> str:
    return f"median of {s.n} runs ({_x(s.lo)} to {_x(s.hi)})" if s.n > 1 else f"{s.n} run"


def self_draft_verdict(result: RaceResult | None):
    """The 'Try this' question about model:self, graded by this race when it used model:self (the speedup against
    the spread of the plain steps, ``plain_noise``)."""
    from engine.predictions.records import race_verdict

    return race_verdict(None if result is None else result.run, plain_noise(result.run) if result else 0.1)


def metrics(result: RaceResult) -> list[tuple[str, str, str]]:
    """(label, value, help) of the seven summary numbers; n/a where a one-token race timed nothing. The two
    speedups are medians over the race's runs, their range in the help."""
    run, ok, na, series = result.run, result.run.measurable, "n/a", result.series
    dec, wall = series.decode_speedup, series.speedup
    decode = decode_check(result).shown if ok and dec.median == dec.median else na
    return [("Acceptance rate a", f"{run.acceptance_rate:.0%}",
             "accepted drafts / drafts the target judged (a rejection ends a round, later drafts are not judged)"),
            ("Tokens per target pass", f"{run.tokens_per_pass:.2f}", "plain decoding: exactly 1"),
            ("Cost ratio c", f"{run.c:.3f}" if ok else na,
             "draft seconds per drafted token / median plain decode step"),
            ("Measured speedup", result.check.shown if ok else na,
             f"wall clock with one prefill for both lanes ({series.shared_prefill_seconds * 1000:,.0f} ms, the "
             f"median of all {2 * series.n} measured: the same work in both): speculative tokens/s / plain "
             f"tokens/s, {_spread(wall)}"),
            ("Decode-only speedup", decode,
             f"each lane's time after its first token (the shared prefill left out), {_spread(dec)}; the headline, "
             "and the number to compare with the formula"),
            ("Paper's formula", f"{run.predicted.paper:.2f}x" if ok else na,
             "(1 - a^(k+1)) / ((1 - a)(k c + 1)) with the measured a and c (Leviathan et al. 2023); it counts "
             "decode rounds only, so compare it with the decode-only speedup"),
            ("Identical output", "yes" if run.identical else "no",
             "token for token. At temperature 0 in float32 it must be yes (tested); in bfloat16 or float16 a verify "
             "pass of k + 1 tokens adds in another order than k + 1 single steps, so a near tie can flip: then the "
             "first differing token is shown below")]


def verdict(result: RaceResult) -> tuple[str, str, str] | None:
    """(box kind: info / warning / success, text, icon) saying what this race's speedup means; None when its
    bound checks already said it (their warnings stand alone). The headline is the median decode-only speedup
    (the prefill both lanes pay left out); runs that timed identical work far apart make it noise, never a win or
    a loss."""
    run, check, series = result.run, result.check, result.series
    if not run.measurable and len(run.plain_step_seconds) >= 2 and run.drafted == 0:
        gap = result.same_work
        return "info", lesson("speculative", "nothing drafted", rounds=len(run.rounds),
                              noise=gap.flags[0] if gap else ""), ":material/hourglass_empty:"
    if not run.measurable:
        return "info", lesson("speculative", "not enough tokens", tokens=len(run.plain_ids)), \
            ":material/hourglass_empty:"
    dec, wall = series.decode_speedup, series.speedup
    numbers = dict(decode=_x(dec.median), lo=_x(dec.lo), hi=_x(dec.hi), n=series.n, wall=_x(wall.median),
                   prefill_ms=series.shared_prefill_seconds * 1000, per_pass=run.tokens_per_pass, c=run.c)
    if run.accepted == 0 and check.no_gain:
        return "info", lesson("speculative", "no gain", accepted=run.accepted, per_pass=run.tokens_per_pass,
                              speedup=wall.median), ":material/trending_flat:"
    if says_noise(result):
        return "warning", lesson("speculative", "noise", why=" ".join(series.flags), **numbers), ":material/blur_on:"
    if check.no_gain:
        return "info", lesson("speculative", "no gain", accepted=run.accepted, per_pass=run.tokens_per_pass,
                              speedup=wall.median), ":material/trending_flat:"
    if dec.median < 1.0:
        return "warning", lesson("speculative", "slower", **numbers), ":material/trending_down:"
    if not check.flags:
        return "success", lesson("speculative", "faster", **numbers), ":material/trending_up:"
    return None


def says_noise(result: RaceResult) -> bool:
    """The verdict is the noise box (it then holds every reason, RaceRepeats.flags): a measurable race with
    something accepted whose runs cannot carry a lesson."""
    run = result.run
    return run.measurable and not (run.accepted == 0 and result.check.no_gain) and result.series.is_noise


def flags_apart(result: RaceResult) -> tuple[str, ...]:
    """The runs' noise flags to show as warnings of their own: all of them, unless the verdict says them."""
    return () if says_noise(result) else result.series.flags


def runs_table(series: RaceRepeats) -> pd.DataFrame:
    """One row per measured run: each lane's prefill (the same work: its gap is noise) and decode time, and the
    run's two speedups; the run the lanes replay is marked."""
    shown = series.shown
    return pd.DataFrame([{"run": i + 1, "replayed": "\u25b6" if r is shown else "",
                          "prefill ms, plain": round(r.plain_step_seconds[0] * 1000, 1),
                          "prefill ms, speculative": round(r.spec_prefill_seconds * 1000, 1),
                          "decode s, plain": round(r.plain_decode_seconds, 3),
                          "decode s, speculative": round(r.spec_decode_seconds, 3),
                          "decode-only speedup": round(r.decode_speedup, 2),
                          "wall clock, shared prefill": round(series.wall_speedup(r), 2)}
                         for i, r in enumerate(series.runs)])


_NAMES = {"model": "model", "prompt": "race prompt", "chat": "chat template", "drafter": "drafter", "k": "k",
          "temperature": "temperature", "top_k": "top-k", "top_p": "top-p", "seed": "seed",
          "max_new_tokens": "tokens to generate"}
_SHOWN = ("drafter", "k", "temperature", "top_k", "top_p", "seed", "max_new_tokens")  # short enough to quote


def params_change(old, new) -> str:
    """One line for a race whose controls moved since it ran: what changed, and that the race shown is the old
    one, labelled with its own settings (``old`` and ``new`` are the page's RaceParams)."""
    moved = []
    for name, label in _NAMES.items():
        a, b = getattr(old, name), getattr(new, name)
        if a != b:
            moved.append(f"{label} {a:g} \u2192 {b:g}" if isinstance(a, float)
                         else f"{label} {md_escape(a)} \u2192 {md_escape(b)}" if name in _SHOWN else label)
    what = ", ".join(moved) or "settings"
    return lesson("speculative", "changed", what=what, drafter=md_escape(old.drafter), k=old.k)


def token_namer(run: SpecRun, tokenizer):
    """id -> the token as the lane showed it (decoded for a rejected draft the lane never kept), made visible."""
    tok_text = dict(zip(run.spec_ids, run.spec_tokens))
    return lambda i: visible(tok_text.get(i) or tokenizer.decode([i]))


def rounds_table(run: SpecRun, t) -> pd.DataFrame:
    """One row per round: drafted, accepted, rejected, the target's token, and the round's draft/verify ms."""
    return pd.DataFrame([{"round": r.index + 1, "drafted": " | ".join(t(i) for i in r.drafted) or "(nothing)",
                          "accepted": r.accepted, "rejected": " | ".join(t(i) for i in r.rejected),
                          "target's token": t(r.token), "kind": r.kind, "from": r.source,
                          "draft ms": round(r.draft_seconds * 1000, 1), "verify ms": round(r.verify_seconds * 1000, 1)}
                         for r in run.rounds])


def round_detail(rnd, t) -> tuple[list[str], pd.DataFrame, str]:
    """One judged round: its drafts' labels, their q, p and min(1, p/q) with the verdict, and what the target
    added (with its top choices there)."""
    labels = [t(i) for i in rnd.drafted[: len(rnd.p)]]
    table = pd.DataFrame({"drafted token": labels, "q (draft)": rnd.q, "p (target)": rnd.p,
                          "min(1, p/q)": rnd.accept_probs,
                          "verdict": ["accepted" if i < rnd.accepted else "rejected" for i in range(len(rnd.p))]})
    added = (f"The target then added **{t(rnd.token)!r}** ({rnd.kind}), {rnd.source}. Its top choices there: "
             + ", ".join(f"{t(i)!r} {pr:.2f}" for i, pr in zip(rnd.target_top_ids, rnd.target_top_probs)))
    return labels, table.round(4), added


def sweep_flags(points) -> list[str]:
    """Bound checks for every k of a sweep (an impossible speedup, a gain with nothing accepted), and the plain lane
    timed more than noise.DISAGREE apart across the ks (the same work each time: the sweep is then noise)."""
    out = []
    for p in points:
        check = noise.check_speedup(p.measured_speedup, p.k, p.accepted, p.tokens_per_pass)
        out += [f"k = {p.k}: {f}" for f in check.flags]
        if p.decode_speedup == p.decode_speedup and p.decode_speedup > p.k + 1:
            out.append(f"k = {p.k}, decode only: impossible, {p.decode_speedup:.2f}x is above the ceiling "
                       f"k + 1 = {p.k + 1}x. The machine was probably busy during one lane: measure again.")
    out += sweep_noise(points)
    return out


def sweep_noise(points) -> list[str]:
    """The plain lane did the same work for every k; timed more than noise.DISAGREE apart, the sweep is noise."""
    plain = [p.plain_decode_seconds for p in points if p.plain_decode_seconds == p.plain_decode_seconds]
    gap = noise.disagreement(min(plain), max(plain)) if plain else 0.0
    if not gap:
        return []
    return [lesson("speculative", "sweep noise", lo=min(plain), hi=max(plain), gap=gap)]


def sweep_verdict(points, drafter: str) -> str:
    """The best k of a sweep (one race per k, so a neighbour within noise may be as good), that no k beat plain
    decoding, or that the sweep is noise."""
    if sweep_noise(points):
        return lesson("speculative", "sweep is noise")
    best = max(points, key=lambda p: p.measured_speedup)
    return lesson("speculative", "best k" if best.measured_speedup >= 1 else "no k", drafter=drafter, k=best.k,
                  speedup=best.measured_speedup)


def first_difference(run) -> tuple[int, str, str] | None:
    """(position from 1, plain token, speculative token) where the two outputs first differ, or None."""
    for i, (a, b) in enumerate(zip(run.plain_ids, run.spec_ids)):
        if a != b:
            return i + 1, run.plain_tokens[i], run.spec_tokens[i]
    if len(run.plain_ids) != len(run.spec_ids):
        i = min(len(run.plain_ids), len(run.spec_ids))
        longer = run.plain_tokens if len(run.plain_ids) > i else run.spec_tokens
        return (i + 1, longer[i], "(end)") if longer is run.plain_tokens else (i + 1, "(end)", longer[i])
    return None


def how_lanes_ran(run) -> str:
    """One line on how each lane of a race ran (engine modes: ``SpecRun.plain_mode``, ``SpecRun.spec_mode``)."""
    words = {"compiled": "compiled (torch.compile graphs)", "eager": "eager", "mixed": "partly compiled, partly eager"}
    plain = words.get(run.plain_mode, "as in the earlier plain run")
    line = (f"How they ran: plain lane's decode steps {plain}; speculative lane's verify passes "
            f"{words.get(run.spec_mode, run.spec_mode)}.")
    # a compiled lane's prefill runs as its bucket's graph where that fits; each lane says how it ran, and why not
    if run.plain_mode == "compiled" and run.plain_prefill:
        line += f" Plain lane's prefill: {run.plain_prefill}."
    if run.spec_mode == "compiled" and run.spec_prefill:
        line += f" Speculative lane's prefill: {run.spec_prefill}."
    return line
