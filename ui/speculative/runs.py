"""The speculative race for the page: measured with the page quiet, replayed into placeholders, and kept per
session so nothing reruns when its inputs did not change (a race runs only when Start is pressed)."""
from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from engine.speculative.drafters import make_drafter
from engine.core.prompt import encode_prompt, token_text
from engine.core.sampling import SamplingSettings
from engine.speculative.decoding import sweep_k
from engine.speculative.records import SpecRun
from engine.speculative.repeats import default_repeats, race_repeats
from engine.core.loaded import ModelRef
from ui.frame import kept, measured, work
from ui.speculative import view as race_view
from ui.frame.compiling import warm_race
from ui.frame.models import get_model, model_named
from ui.speculative.view import RaceResult
from ui.speculative.figures import clock_html, lane_html

_LAST = "speculative_last"  # (params, result) of this session's last finished race, whatever its settings


@dataclass(frozen=True)
class RaceParams:
    model: ModelRef
    prompt: str
    chat: bool
    drafter: str
    k: int
    temperature: float
    top_k: int
    top_p: float
    seed: int
    max_new_tokens: int
    min_p: float = 0.0

    @property
    def settings(self) -> SamplingSettings:
        """The race's sampling: the sidebar's filters at the race's own temperature (none of them at 0: greedy)."""
        on = self.temperature > 0
        return SamplingSettings(self.temperature, self.top_k if on else 0, self.top_p if on else 1.0,
                                self.min_p if on else 0.0)


def finished(params: RaceParams) -> RaceResult | None:
    """This session's last race for exactly these settings (None: not raced yet; the page waits for Start)."""
    return kept.get(("speculative race", params))


def last() -> tuple[RaceParams, RaceResult] | None:
    """This session's last finished race with the settings it ran with (shown, labelled, after a control moved)."""
    return st.session_state.get(_LAST)


def again_requested() -> bool:
    """The busy warning's "Measure again" button was pressed (read before the race's own button is drawn)."""
    return measured.again_pressed("speculative_again")


def run_live(params: RaceParams, plain_lane, plain_clock, spec_lane, spec_clock) -> RaceResult:
    """Race plain against speculative decoding with the page quiet (nothing is drawn while either lane is
    measured, so neither pays for drawing): a warm-up race, then ILE_RACE_REPEATS races; then replay the median
    run's lanes at the engine-measured pace. The measurement carries its calibration (when, under what load). Raises
    PromptError / DrafterError / ModelLoadError for the page to show."""
    lm = get_model(params.model)
    ids = list(encode_prompt(lm.tokenizer, params.prompt, params.chat).ids)
    drafter = make_drafter(lm, params.drafter, loader=model_named)
    warm_race(lm, len(ids) + int(params.max_new_tokens), int(params.k), len(ids))  # compiled: no compile in a clock
    for lane, clock in ((plain_lane, plain_clock), (spec_lane, spec_clock)):
        lane.html(lane_html([], cursor=True))
        clock.html(clock_html(0.0, 0, 0))
    repeats = default_repeats()
    bar = st.progress(0.0, text=f"Racing on the engine: a warm-up race, then {repeats} races with the page quiet "
                                "(the lanes then replay the median one at its measured pace)...")
    with measured.calibrated() as cal:
        # on the engine worker, with this page quiet: no UI work inside either lane's clock (the bar moves
        # between runs only)
        series = work.run(race_repeats, lm, ids, params.drafter, params.k, params.settings, params.max_new_tokens,
                          params.seed, repeats, drafter=drafter, on_progress=work.relay("progress"),
                          key=("race", params),
                          events={"progress": lambda i, n: bar.progress(i / n, text=f"Race {i} of {n} done")})
    bar.empty()
    result = race_view.judge(series, cal.result)
    kept.put(("speculative race", params), result)
    st.session_state[_LAST] = (params, result)
    run = result.run
    race_view.replay(run, plain_pieces_of(run), lane_pieces(run), plain_lane, plain_clock, spec_lane, spec_clock)
    show_final(run, plain_lane, plain_clock, spec_lane, spec_clock)
    return result


def show_final(run: SpecRun, plain_lane, plain_clock, spec_lane, spec_clock) -> None:
    plain_clock.html(clock_html(run.plain_seconds, len(run.plain_ids), len(run.plain_ids)))
    plain_lane.html(lane_html(plain_pieces_of(run)))
    spec_clock.html(clock_html(run.spec_seconds, len(run.spec_ids), run.target_passes))
    spec_lane.html(lane_html(lane_pieces(run)))


def lane_pieces(run: SpecRun) -> list[tuple[str, str]]:
    """The speculative lane of a finished run: every round's accepted, rejected and own tokens (cut to the
    tokens actually kept, so an end-of-turn inside a round shows as it was used)."""
    tok = get_model(ModelRef(run.model)).tokenizer  # the run names its model for people; a tokenizer is the same at every precision and mode
    pieces = [(run.spec_tokens[0], "prefill")] if run.spec_tokens else []
    kept = 1
    for rnd in run.rounds:
        roles = ["accepted"] * rnd.accepted + ["rejected"] * len(rnd.rejected) + [rnd.kind]
        for w, role in zip(list(rnd.drafted) + [rnd.token], roles):
            if role == "rejected":
                pieces.append((token_text(tok, [w])[0], role))
            elif kept < len(run.spec_ids):
                pieces.append((run.spec_tokens[kept], role))
                kept += 1
    return pieces


def plain_pieces_of(run: SpecRun) -> list[tuple[str, str]]:
    return [(t, "prefill" if i == 0 else "plain") for i, t in enumerate(run.plain_tokens)]


def sweep(params: RaceParams, ks: tuple[int, ...], max_new_tokens: int, progress=None):
    """Speedup against k (plain re-measured for each k), kept per session; None until run on request."""
    key = (params, ks, max_new_tokens)
    done = kept.get(("speculative sweep", key))
    if done is None and progress is not None:
        lm = get_model(params.model)
        ids = list(encode_prompt(lm.tokenizer, params.prompt, params.chat).ids)
        drafter = make_drafter(lm, params.drafter, loader=model_named)  # loads a draft model here, not on the worker
        done = kept.put(("speculative sweep", key),
                        work.run(sweep_k, lm, ids, params.drafter, ks, params.settings, max_new_tokens, params.seed,
                                 on_progress=work.relay("progress"), drafter=drafter,
                                 key=("sweep", key), events={"progress": progress}))
    return done


def repeats() -> int:
    """How many timed races a race runs after its warm-up (ILE_RACE_REPEATS): the page's clocks say it."""
    return default_repeats()
