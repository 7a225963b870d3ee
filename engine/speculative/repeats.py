"""A race a lesson can stand on: one warm-up race, then ``n`` races of the same prompt, settings and seed, each
the plain lane then the speculative lane (so the lanes alternate and a shared machine's drift hits both alike).

Both lanes pay the same prefill (the same pass over the same prompt), so it can only differ by noise: one busy
moment timed it 2,630 ms in one lane and 723 ms in the other and turned a loss into a win. Here the prefill never
decides the race:
- the headline is the decode-only speedup (``SpecRun.decode_speedup``), the median over the runs;
- the wall-clock speedup gives both lanes one shared prefill, the median of every prefill measured (2n of them),
  and adds each run's measured decode times to it;
- work that is identical (the two lanes' prefills; one lane's decode over the runs, the same tokens each time)
  and was timed more than ``noise.DISAGREE`` apart is flagged, and such a race is noise, never a lesson.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable

import engine.settings as settings
from engine.core.loaded import LoadedModel
from engine.core.sampling import SamplingSettings
from engine.measure import noise
from engine.measure.spread import Spread
from engine.speculative.decoding import race
from engine.speculative.records import SpecRun
from engine.speculative.drafters import Drafter, make_drafter

LESSON_RUNS = 5  # the fewest runs whose median a page turns into a sentence
WARM_UP_TOKENS = 16  # the warm-up race: enough rounds to run the drafter and the verify pass before any timing


@dataclass(frozen=True)
class RaceRepeats:
    """The runs of one race, in the order measured (warm-up not included), and what they say together."""

    runs: tuple[SpecRun, ...]
    warmed_up: bool = False  # an untimed race ran first (race_repeats)

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def shown(self) -> SpecRun:
        """The run whose decode-only speedup is the median (the lower middle for an even n): the one the lanes
        replay, so the picture and the headline tell the same story. The first run when none is measurable."""
        finite = [r for r in self.runs if math.isfinite(r.decode_speedup)]
        if not finite:
            return self.runs[0]
        return sorted(finite, key=lambda r: r.decode_speedup)[(len(finite) - 1) // 2]

    @property
    def decode_speedup(self) -> Spread:
        """Measured, decode only, over the runs (SpecRun.decode_speedup): the headline."""
        return noise.summarize([r.decode_speedup for r in self.runs if math.isfinite(r.decode_speedup)],
                               "the decode-only speedup")

    @property
    def plain_prefill(self) -> Spread:
        return noise.summarize([r.plain_step_seconds[0] for r in self.runs if r.plain_step_seconds],
                               "the plain lane's prefill")

    @property
    def spec_prefill(self) -> Spread:
        return noise.summarize([r.spec_prefill_seconds for r in self.runs], "the speculative lane's prefill")

    @property
    def shared_prefill_seconds(self) -> float:
        """One prefill time for both lanes: the median of every prefill measured, in either lane."""
        both = [r.plain_step_seconds[0] for r in self.runs if r.plain_step_seconds]
        both += [r.spec_prefill_seconds for r in self.runs]
        return float(statistics.median(both)) if both else float("nan")

    def wall_speedup(self, run: SpecRun) -> float:
        """One run's wall-clock speedup with the shared prefill in both lanes: speculative tokens per second over
        plain tokens per second, each lane's time = shared prefill + its measured decode time."""
        p = self.shared_prefill_seconds
        plain_s, spec_s = p + run.plain_decode_seconds, p + run.spec_decode_seconds
        if not plain_s > 0 or not spec_s > 0:
            return float("nan")
        return (len(run.spec_ids) / spec_s) / (len(run.plain_ids) / plain_s)

    @property
    def speedup(self) -> Spread:
        """Measured, wall clock with one shared prefill, over the runs."""
        return noise.summarize([w for w in map(self.wall_speedup, self.runs) if math.isfinite(w)],
                               "the wall-clock speedup")

    @property
    def flags(self) -> tuple[str, ...]:
        """Why these runs cannot be made into a lesson (empty when they can): too few runs, or identical work
        timed more than noise.DISAGREE apart."""
        out = []
        if self.n < LESSON_RUNS:
            out.append(f"Only {self.n} run(s): a lesson needs the median of at least {LESSON_RUNS}.")
        shown = self.shown
        pairs = [(f"median of {self.n}", self.plain_prefill.median, self.spec_prefill.median)]
        if self.n > 1 and shown.plain_step_seconds:  # the pair the lanes' clocks show
            pairs.append(("in the median run, the one replayed", shown.plain_step_seconds[0],
                          shown.spec_prefill_seconds))
        for where, plain, spec in pairs:
            gap = noise.disagreement(plain, spec)
            if gap:
                out.append(f"The prefill is the same work in both lanes, yet it took {plain * 1000:,.0f} ms in the "
                           f"plain lane and {spec * 1000:,.0f} ms in the speculative one ({where}): {gap:.1f}x apart, "
                           "so the machine's noise is larger than the effect.")
        for lane, seconds in (("plain", [r.plain_decode_seconds for r in self.runs]),
                              ("speculative", [r.spec_decode_seconds for r in self.runs])):
            gap = noise.disagreement(min(seconds), max(seconds)) if seconds else 0.0
            if gap:
                out.append(f"The {lane} lane did the same work in each of the {self.n} runs, yet its decode took from "
                           f"{min(seconds):.2f} s to {max(seconds):.2f} s: {gap:.1f}x apart.")
        return tuple(out)

    @property
    def is_noise(self) -> bool:
        """True when the runs cannot carry a lesson: the headline must say noise, not a win or a loss."""
        return bool(self.flags)

    def to_dict(self) -> dict:
        """What the command line adds to the shown run's JSON."""
        d, w, shown = self.decode_speedup, self.speedup, self.shown
        return {"n": self.n, "warmed_up": self.warmed_up,
                "shown_run": next(i for i, r in enumerate(self.runs) if r is shown),
                "decode_speedup": {**d.range_dict(), "values": [r.decode_speedup for r in self.runs]},
                "wall_speedup_shared_prefill": {**w.range_dict(), "values": [self.wall_speedup(r) for r in self.runs]},
                "shared_prefill_seconds": self.shared_prefill_seconds,
                "plain_prefill_seconds": [r.plain_step_seconds[0] for r in self.runs],
                "spec_prefill_seconds": [r.spec_prefill_seconds for r in self.runs],
                "plain_decode_seconds": [r.plain_decode_seconds for r in self.runs],
                "spec_decode_seconds": [r.spec_decode_seconds for r in self.runs],
                "noise": self.is_noise, "flags": list(self.flags)}


def default_repeats() -> int:
    """Races measured after the warm-up: ILE_RACE_REPEATS (LESSON_RUNS unless set lower for a slow machine)."""
    return settings.RACE_REPEATS.get()


def race_repeats(lm: LoadedModel, ids: list[int], drafter_spec: str, k: int,
                 sampling: SamplingSettings = SamplingSettings(), max_new_tokens: int = 64, seed: int = 0,
                 repeats: int | None = None, drafter: Drafter | None = None,
                 on_progress: Callable[[int, int], None] | None = None) -> RaceRepeats:
    """A warm-up race (untimed, ``WARM_UP_TOKENS`` at most: the first run in a fresh process pays one-off costs
    that made a CLI race read 0.72x where the same race read 5.87x after), then ``repeats`` races
    (engine.speculative.decoding.race; None: default_repeats()). ``on_progress(done, total)`` hears each run."""
    total = max(1, int(default_repeats() if repeats is None else repeats))
    drafter = drafter or make_drafter(lm, drafter_spec)
    race(lm, ids, drafter_spec, k, sampling, min(max_new_tokens, WARM_UP_TOKENS), seed, drafter=drafter)
    runs = []
    for i in range(total):
        runs.append(race(lm, ids, drafter_spec, k, sampling, max_new_tokens, seed, drafter=drafter))
        if on_progress is not None:
            on_progress(i + 1, total)
    return RaceRepeats(tuple(runs), warmed_up=True)
