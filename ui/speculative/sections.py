"""The speculative page's blocks, each drawn whole (the page lays them out in order): the race's controls, the
race itself (legend, Start, two lanes), its scoreboard, every round on demand and the k sweep on demand.
Display values come from ui/speculative/view.py, figures from ui/speculative/figures.py, texts from
assets/lessons/speculative.md; a race or a sweep runs only when its button is pressed (ui/speculative/runs.py)."""
from __future__ import annotations

import streamlit as st

from engine.speculative import MAX_K, PROMPTS
from engine.speculative.drafters import DrafterError
from engine.core.loaded import ModelLoadError
from engine.core.prompt import PromptError
from ui.speculative import view as RV
from ui.frame import state
from ui.frame.html import md_escape, visible
from ui.frame.layout import chart, scroll_to_here
from ui.frame.lessons import lesson
from ui.frame.measured import busy_warning
from ui.frame.models import draft_model_box, get_model, measured_model
from ui.speculative.view import RaceResult
from ui.speculative.runs import RaceParams, again_requested, finished, last, run_live, show_final, sweep
from ui.speculative.figures import lane_html, legend_html, round_pq_bar, sweep_figure

PRESETS = {f"{name} ({kind}): {text[:60]}...": text for name, kind, text in PROMPTS}
PRESET_NAMES = [name for name, _, _ in PROMPTS] + ["own"]  # the race prompt in the URL (race_prompt=...)
OWN = "your own text (type it below)"
OLD_NAMES = {"sidebar": "own"}  # links made before the race had a text box of its own
MAX_TEXT = 50_000  # characters of an own race text, as the sidebar prompt allows
DRAFTERS = {"lookup": "copy from the context", "early-exit": "first L blocks of the target",
            "model:self": "the target drafts for itself", "model:random": "random weights", "model:other": "another model"}
SWEEP_KS = (1, 2, 3, 4, 6, 8, 12)
RACE_FOLLOW_S = 90  # the lanes stay at the top of the view while the race runs and replays (a scroll stops it)
DEFAULT_PRESET, DEFAULT_K, DEFAULT_T = 1, 4, 0.0


def controls(lm) -> RaceParams:
    """The race prompt, drafter, k, temperature, seed and length (the last two start at the sidebar's). The
    prompt preset, drafter, k, temperature and early-exit L are kept in the URL (race_prompt, race_drafter,
    race_k, race_t, race_layers), so a copied link opens the same race; they start there when a link gives them."""
    s = state.settings()
    url_preset = state.page_text("race_prompt", PRESET_NAMES + list(OLD_NAMES))
    url_preset = OLD_NAMES.get(url_preset, url_preset)
    url_drafter = state.page_text("race_drafter", list(DRAFTERS))
    c1, c2 = st.columns([3, 2])
    with c1:
        choices = [*PRESETS, OWN]
        choice = st.selectbox("Race prompt", choices,
                              index=PRESET_NAMES.index(url_preset) if url_preset else DEFAULT_PRESET,
                              key="speculative_prompt",
                              help="Extractive tasks (rewrite, quote, summarise a passage) copy from the prompt, so "
                                   "prompt lookup guesses well; open-ended ones give it little to copy.")
        prompt = own_text(s.prompt) if choice == OWN else PRESETS[choice]
        kind = st.radio(
            "Drafter", list(DRAFTERS), horizontal=True, key="speculative_drafter", captions=list(DRAFTERS.values()),
            index=list(DRAFTERS).index(url_drafter) if url_drafter else 0,
            help="lookup: find the last 3 (or 2) tokens earlier in the text and propose what followed them "
                 "(no model). early-exit: the target's own first L blocks plus its output head. model:self: the "
                 "target as its own draft (always right at temperature 0, but as slow as the target). model:random: "
                 "a random-weight model with 2 blocks (almost always wrong). model:other: any model with the same "
                 "tokenizer.")
    with c2:
        k = st.slider("Draft length k (tokens per round)", 1, MAX_K, state.page_param("race_k", DEFAULT_K, 1, MAX_K),
                      key="speculative_k")
        temperature = st.slider("Temperature", 0.0, 1.5, state.page_number("race_t", DEFAULT_T, 0.0, 1.5, 0.05), 0.05,
                                key="speculative_temperature",
                                help="0 = greedy. Above 0, top-k and top-p come from the sidebar.")
        cc1, cc2 = st.columns(2)
        seed = cc1.number_input("Seed", 0, 2**31 - 1, s.seed, key="speculative_seed")
        max_new = cc2.number_input("Tokens to generate", 1, 256, s.max_new_tokens, 8, key="speculative_tokens",
                                   help="Starts at the sidebar's max new tokens; longer races show the difference "
                                        "better.")
    url = {"race_prompt": PRESET_NAMES[choices.index(choice)], "race_drafter": kind, "race_k": int(k),
           "race_t": f"{float(temperature):g}"}
    if choice == OWN:
        url["race_text"] = prompt  # a copied link races the same text
    drafter = kind
    if kind == "early-exit":
        most = lm.info.n_layers - 1  # the draft must stop before the target's last block
        if most > 1:
            layers = st.slider("Early exit after L blocks", 1, most,
                               state.page_param("race_layers", max(1, lm.info.n_layers // 4), 1, most),
                               key="speculative_layers")
        else:  # a 2-block model leaves one choice (a slider from 1 to 1 is refused by Streamlit)
            layers = 1
            st.caption(f"Early exit after L = 1 block: this model has only {lm.info.n_layers} blocks.")
        drafter = f"early-exit:{layers}"
        url["race_layers"] = layers
    elif kind == "model:random":
        drafter = "model:random:2"
    elif kind == "model:other":
        drafter = f"model:{draft_model_box('speculative_other')}"  # class mode: the allow-list only
    state.put_page_params(**url)
    state.write_query_params()  # now: the page stops early (st.stop) until a race ran, before app.py's write
    return RaceParams(measured_model(lm).ref, prompt, s.chat, drafter, int(k), float(temperature), s.top_k,
                      s.top_p, int(seed), int(max_new), min_p=s.min_p)


def own_text(sidebar_prompt: str) -> str:
    """The race's own prompt box (starts with the link's race text, else the sidebar prompt): racing your own text
    needs no trip to the sidebar."""
    start = state.page_free_text("race_text", MAX_TEXT) or sidebar_prompt
    return st.text_area("Text to race (as a prompt to the model)", start, max_chars=MAX_TEXT, height=100,
                        key="speculative_text",
                        help="Prompt lookup drafts by copying from this text, so text the answer will quote or "
                             "rewrite races best.")


def lanes(params: RaceParams) -> tuple[RaceResult | None, RaceParams]:
    """The legend, the Start button and both lanes. Races on Start (or "Measure again"), else shows this session's
    race for these settings, else its last race labelled with its own settings under a one-line message saying
    what changed, else waits; stops the page when the prompt or the drafter is refused. Returns the race shown
    and the settings it ran with."""
    st.html(legend_html())
    go = st.button("Start the race", type="primary", icon=":material/sprint:", key="speculative_go")
    racing = go or again_requested()
    result, shown = finished(params), params
    if not racing and result is None and last() is not None:
        shown, result = last()
        st.info(RV.params_change(shown, params), icon=":material/restart_alt:")
    if racing:  # the controls fill a projector's first screen: bring the lanes, then the scoreboard, into view
        scroll_to_here(follow_s=RACE_FOLLOW_S)
    left, right = st.columns(2)
    with left:
        st.markdown("#### Plain decoding")
        plain_clock, plain_lane = st.empty(), st.empty()
    with right:
        st.markdown(f"#### Speculative: {md_escape(shown.drafter)}, k = {shown.k}")
        spec_clock, spec_lane = st.empty(), st.empty()
    slots = (plain_lane, plain_clock, spec_lane, spec_clock)
    if racing:
        try:
            result = run_live(params, *slots)
        except PromptError as exc:
            st.warning(str(exc), icon=":material/edit_note:")
            st.stop()
        except (DrafterError, ModelLoadError) as exc:
            st.error(f"This drafter cannot be used: {md_escape(exc)}", icon=":material/block:")
            st.stop()
    elif result is not None:
        show_final(result.run, *slots)
    if result is not None and result.same_work:  # under the lanes, where their clocks differ: the gap is noise
        gap = result.same_work
        st.warning(lesson("speculative", "same work", plain=gap.seconds_a, spec=gap.seconds_b, gap=gap.gap),
                   icon=":material/balance:")
    elif result is None:
        for lane in (plain_lane, spec_lane):
            lane.html(lane_html([]))
        st.info(lesson("speculative", "press start"), icon=":material/sprint:")
    return result, shown


def scoreboard(result: RaceResult, params: RaceParams) -> None:
    """The seven numbers, the busy warning and their bound checks, what they mean for this race, then every gap
    between the paper's formula and the clock, one assumption at a time."""
    run = result.run
    for col, (label, value, help_) in zip(st.columns(7), RV.metrics(result)):  # first: on screen under the lanes
        col.metric(label, value, help=help_)
    busy_warning(result.calibration, "speculative_again")
    for flag in (result.check.flags if run.measurable else ()) + RV.flags_apart(result):
        st.warning(flag, icon=":material/report:")
    st.caption(f"Measured on this machine: {result.series.n} runs after a warm-up race, the two speedups their medians "
               f"({run.threads} CPU threads; {result.calibration.describe()}). "
               "Expected speedup by the paper's formula (1 - a^(k+1)) / ((1 - a)(k c + 1)).")
    verdict = RV.verdict(result)
    if verdict:
        box, text, icon = verdict
        {"info": st.info, "warning": st.warning, "success": st.success}[box](text, icon=icon)
    for flag in RV.decode_flags(result):
        st.warning(flag, icon=":material/report:")
    if run.measurable:
        st.markdown(RV.gap_table(run, result.series))
    st.markdown(lesson("speculative", "runs", n=result.series.n))
    st.dataframe(RV.runs_table(result.series), hide_index=True)
    if params.temperature == 0 and not run.identical:
        pos, plain, spec = RV.first_difference(run) or (0, "", "")
        dtype = get_model(params.model).info.dtype
        if dtype in ("bfloat16", "float16"):  # a near tie flipped by rounding: shown, not hidden
            st.warning(lesson("speculative", "outputs differ half", token=pos, plain=md_escape(visible(plain)),
                              spec=md_escape(visible(spec)), dtype=dtype), icon=":material/difference:")
        else:
            st.error(lesson("speculative", "outputs differ"))
    elif params.temperature > 0:
        st.info(lesson("speculative", "sampled"), icon=":material/casino:")


def rounds(run, tokenizer) -> None:
    """Every round's drafts and verdicts, then one judged round's q, p and min(1, p/q)."""
    t = RV.token_namer(run, tokenizer)
    table = RV.rounds_table(run, t)
    st.dataframe(table, hide_index=True, height=min(420, 38 + 35 * len(table)))
    judged = [r for r in run.rounds if r.p]
    if judged:
        pick = st.selectbox("Look inside round", [r.index + 1 for r in judged], key="speculative_round")
        rnd = run.rounds[pick - 1]
        labels, detail, added = RV.round_detail(rnd, t)
        st.dataframe(detail, hide_index=True)
        st.markdown(added)
        chart(round_pq_bar(rnd, labels), "model",
              "q and p after the same sampling settings (at temperature 0 both are one-hot: 1 or 0).")


def k_sweep(params: RaceParams, ks: tuple[int, ...] = SWEEP_KS) -> None:
    """The sweep's button (until it ran for these settings), then speedup against k with its verdict."""
    tokens = min(48, params.max_new_tokens)
    pts = sweep(params, ks, tokens)
    if pts is None and st.button(f"Run the k sweep (k = {', '.join(map(str, ks))}; {tokens} tokens each)",
                                 key="speculative_sweep"):
        bar = st.progress(0.0, text="Sweeping k...")
        pts = sweep(params, ks, tokens,
                    progress=lambda i, n: bar.progress(i / n, text=f"k = {ks[i - 1]} done ({i}/{n})"))
        bar.empty()
    if pts:
        chart(sweep_figure(pts, params.drafter), "measured",
              f"Measured speedup per k (one race each, plain re-measured), on the wall clock and decode only (the "
              f"shared prefill left out), next to the paper's formula with that k's measured a, c and draft "
              f"lengths, which counts decode rounds only: compare it with the decode-only line. With {tokens} "
              "tokens requested, a draft is cut to the tokens still wanted, so a large k cannot draft k every "
              "round.")
        for flag in RV.sweep_flags(pts):
            st.warning(flag, icon=":material/report:")
        st.markdown(RV.sweep_verdict(pts, params.drafter))
