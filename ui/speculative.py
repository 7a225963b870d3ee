"""The speculative race for the page: live streaming into placeholders, and results kept per session so
nothing reruns when its inputs did not change (a new race only on request)."""
from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from engine.experiments.drafters import make_drafter
from engine.prompt import encode_prompt, token_text
from engine.sampling import SamplingSettings
from engine.experiments.speculative import SpecRun, race, sweep_k
from ui import work
from ui.models import get_model
from ui.speculative_figures import clock_html, lane_html

_RACES = "speculative_races"
_SWEEPS = "speculative_sweeps"


@dataclass(frozen=True)
class RaceParams:
    model: str
    prompt: str
    chat: bool
    drafter: str
    k: int
    temperature: float
    top_k: int
    top_p: float
    seed: int
    max_new_tokens: int

    @property
    def settings(self) -> SamplingSettings:
        return SamplingSettings(self.temperature, self.top_k if self.temperature > 0 else 0,
                                self.top_p if self.temperature > 0 else 1.0)


def _store(name: str) -> dict:
    return st.session_state.setdefault(name, {})


def finished(params: RaceParams) -> SpecRun | None:
    return _store(_RACES).get(params)


def run_live(params: RaceParams, plain_lane, plain_clock, spec_lane, spec_clock) -> SpecRun:
    """Run plain then speculative decoding, streaming each lane's text and clock as tokens arrive (the clocks
    show engine-measured seconds: drawing the page is not counted). Raises PromptError / DrafterError /
    ModelLoadError for the page to show."""
    lm = get_model(params.model)
    ids = list(encode_prompt(lm.tokenizer, params.prompt, params.chat).ids)
    drafter = make_drafter(lm, params.drafter, loader=get_model)
    tok = lm.tokenizer
    plain_pieces: list[tuple[str, str]] = []
    spec_pieces: list[tuple[str, str]] = []
    clock = {"plain": 0.0, "spec": 0.0, "passes": 0}
    spec_lane.html(lane_html([]))
    spec_clock.html(clock_html(0.0, 0, 0))

    def on_step(step):
        clock["plain"] += step.seconds
        plain_pieces.append((step.token, "prefill" if step.index == 0 else "plain"))
        plain_lane.html(lane_html(plain_pieces, cursor=True))
        plain_clock.html(clock_html(clock["plain"], len(plain_pieces), step.index + 1))

    def on_prefill(token: int, seconds: float):
        plain_lane.html(lane_html(plain_pieces))
        clock["spec"], clock["passes"] = seconds, 1
        spec_pieces.append((token_text(tok, [token])[0], "prefill"))
        spec_lane.html(lane_html(spec_pieces, cursor=True))
        spec_clock.html(clock_html(seconds, 1, 1))

    def on_round(rnd):
        clock["spec"] += rnd.draft_seconds + rnd.verify_seconds
        clock["passes"] += 1
        words = token_text(tok, list(rnd.drafted) + [rnd.token])
        spec_pieces.extend((w, "accepted") for w in words[: rnd.accepted])
        spec_pieces.extend((w, "rejected") for w in words[rnd.accepted:-1])
        spec_pieces.append((words[-1], rnd.kind))
        spec_lane.html(lane_html(spec_pieces, cursor=True))
        shown = sum(1 for _, role in spec_pieces if role != "rejected")
        spec_clock.html(clock_html(clock["spec"], shown, clock["passes"]))

    # The race runs on the engine worker; its steps come back as events drawn here, on the script thread.
    run = work.run(race, lm, ids, params.drafter, params.k, params.settings, params.max_new_tokens, params.seed,
                   drafter=drafter, on_plain_step=work.relay("plain"), on_round=work.relay("round"),
                   on_prefill=work.relay("prefill"), key=("race", params),
                   events={"plain": on_step, "round": on_round, "prefill": on_prefill})
    plain_lane.html(lane_html(plain_pieces))
    spec_lane.html(lane_html(lane_pieces(run)))
    _store(_RACES)[params] = run
    return run


def lane_pieces(run: SpecRun) -> list[tuple[str, str]]:
    """The speculative lane of a finished run: every round's accepted, rejected and own tokens (cut to the
    tokens actually kept, so an end-of-turn inside a round shows as it was used)."""
    tok = get_model(run.model).tokenizer
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
    store = _store(_SWEEPS)
    if key not in store and progress is not None:
        lm = get_model(params.model)
        ids = list(encode_prompt(lm.tokenizer, params.prompt, params.chat).ids)
        drafter = make_drafter(lm, params.drafter, loader=get_model)  # loads a draft model here, not on the worker
        store[key] = work.run(sweep_k, lm, ids, params.drafter, ks, params.settings, max_new_tokens, params.seed,
                              on_progress=work.relay("progress"), drafter=drafter,
                              key=("sweep", key), events={"progress": progress})
    return store.get(key)
