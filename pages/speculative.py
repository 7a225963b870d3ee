"""Speculative decoding: plain decoding and draft-and-verify race on the same prompt, for real."""
import ui.boot  # noqa: F401  first: every module imported once, in one thread (see ui/boot.py)
import pandas as pd
import streamlit as st

from engine.bench.specdec import PROMPTS
from engine.experiments.drafters import DrafterError
from engine.models import ModelLoadError
from engine.prompt import PromptError
from engine.experiments.speculative import MAX_K
from ui import nav, state
from ui.html import md_escape, visible
from ui.layout import chart, try_this, what_you_see
from ui.lessons import lesson
from ui.measured import busy_warning
from ui.models import current_model, draft_model_box
from ui.race_view import formula_note, self_draft_answer, sweep_flags
from ui.speculative import RaceParams, again_requested, finished, run_live, show_final, sweep
from ui.speculative_figures import (lane_html, legend_html, progress_lines, round_pq_bar, round_times_bar,
                                    rounds_bar, sweep_figure)

nav.through_router()
st.title("Speculative decoding: the race")
st.markdown(lesson("speculative", "intro"))
lm = current_model()
s = state.settings()
what_you_see(lesson("speculative", "what you see"))

# ---- controls -------------------------------------------------------------------------------------------
presets = {f"{name} ({kind}): {text[:60]}...": text for name, kind, text in PROMPTS}
SIDEBAR = "the sidebar prompt"
c1, c2 = st.columns([3, 2])
with c1:
    choice = st.selectbox("Race prompt", [*presets, SIDEBAR], index=1, key="speculative_prompt",
                          help="Extractive tasks (rewrite, quote, summarise a passage) copy from the prompt, so "
                               "prompt lookup guesses well; open-ended ones give it little to copy.")
    prompt = s["prompt"] if choice == SIDEBAR else presets[choice]
    drafter_kind = st.radio(
        "Drafter", ["lookup", "early-exit", "model:self", "model:random", "model:other"], horizontal=True,
        key="speculative_drafter",
        captions=["copy from the context", "first L blocks of the target", "the target drafts for itself",
                  "random weights", "another model"],
        help="lookup: find the last 3 (or 2) tokens earlier in the text and propose what followed them "
             "(no model). early-exit: the target's own first L blocks plus its output head. model:self: the "
             "target as its own draft (always right at temperature 0, but as slow as the target). model:random: a "
             "random-weight model with 2 blocks "
             "(almost always wrong). model:other: any model with the same tokenizer.")
with c2:
    k = st.slider("Draft length k (tokens per round)", 1, MAX_K, 4, key="speculative_k")
    temperature = st.slider("Temperature", 0.0, 1.5, 0.0, 0.05, key="speculative_temperature",
                            help="0 = greedy. Above 0, top-k and top-p come from the sidebar.")
    cc1, cc2 = st.columns(2)
    seed = cc1.number_input("Seed", 0, 2**31 - 1, int(s["seed"]), key="speculative_seed")
    max_new = cc2.number_input("Tokens to generate", 1, 256, int(s["max_new_tokens"]), 8, key="speculative_tokens",
                               help="Starts at the sidebar's max new tokens; longer races show the difference better.")

drafter = drafter_kind
if drafter_kind == "early-exit":
    layers = st.slider("Early exit after L blocks", 1, lm.info.n_layers - 1, max(1, lm.info.n_layers // 4),
                       key="speculative_layers")
    drafter = f"early-exit:{layers}"
elif drafter_kind == "model:random":
    drafter = "model:random:2"
elif drafter_kind == "model:other":
    drafter = f"model:{draft_model_box('speculative_other')}"  # class mode: the allow-list only

params = RaceParams(lm.name, prompt, bool(s["chat"]), drafter, int(k), float(temperature), int(s["top_k"]),
                    float(s["top_p"]), int(seed), int(max_new))

# ---- the race -------------------------------------------------------------------------------------------
st.html(legend_html())
go = st.button("Start the race", type="primary", icon=":material/sprint:", key="speculative_go")
left, right = st.columns(2)
with left:
    st.markdown("#### Plain decoding")
    plain_clock, plain_lane = st.empty(), st.empty()
with right:
    st.markdown(f"#### Speculative: {md_escape(drafter)}, k = {k}")
    spec_clock, spec_lane = st.empty(), st.empty()

result = finished(params)
if go or again_requested():
    try:
        result = run_live(params, plain_lane, plain_clock, spec_lane, spec_clock)
    except PromptError as exc:
        st.warning(str(exc), icon=":material/edit_note:")
        st.stop()
    except (DrafterError, ModelLoadError) as exc:
        st.error(f"This drafter cannot be used: {md_escape(exc)}", icon=":material/block:")
        st.stop()
elif result is not None:
    show_final(result.run, plain_lane, plain_clock, spec_lane, spec_clock)
else:
    for lane in (plain_lane, spec_lane):
        lane.html(lane_html([]))
    st.info(lesson("speculative", "press start"), icon=":material/sprint:")
st.caption(lesson("speculative", "clocks"))

# ---- summary --------------------------------------------------------------------------------------------
if result is not None:
    run, check = result.run, result.check
    st.header("Who won, and why", divider="gray")
    busy_warning(result.calibration, "speculative_again")
    m = st.columns(6)
    m[0].metric("Acceptance rate a", f"{run.acceptance_rate:.0%}",
                help="accepted drafts / drafts the target judged (a rejection ends a round, later drafts are not "
                     "judged)")
    m[1].metric("Tokens per target pass", f"{run.tokens_per_pass:.2f}", help="plain decoding: exactly 1")
    ok = run.measurable  # 1 token (or an answer that ends at once): nothing was decoded, so nothing to compare
    NA = "n/a"
    m[2].metric("Cost ratio c", f"{run.c:.3f}" if ok else NA,
                help="draft seconds per drafted token / median plain decode step")
    m[3].metric("Measured speedup", check.shown if ok else NA,
                help=f"speculative tokens/s / plain tokens/s, this run: {run.speedup:.2f}x")
    m[4].metric("Paper's formula", f"{run.expected_speedup:.2f}x" if ok else NA,
                help="(1 - a^(k+1)) / ((1 - a)(k c + 1)) with the measured a and c (Leviathan et al. 2023)")
    m[5].metric("Identical output", "yes" if run.identical else "no",
                help="token for token; must be yes at temperature 0")
    for flag in (check.flags if ok else ()):
        st.warning(flag, icon=":material/report:")
    st.caption(f"Measured on this machine in one run ({run.threads} CPU threads; {result.calibration.describe()}). "
               "Expected speedup by the paper's formula (1 - a^(k+1)) / ((1 - a)(k c + 1)).")
    if not ok:
        st.info(lesson("speculative", "not enough tokens", tokens=len(run.plain_ids)),
                icon=":material/hourglass_empty:")
    elif check.no_gain:
        st.info(lesson("speculative", "no gain", accepted=run.accepted, per_pass=run.tokens_per_pass,
                       speedup=run.speedup), icon=":material/trending_flat:")
    elif run.speedup < 1.0:
        st.warning(lesson("speculative", "slower", speedup=run.speedup, c=run.c, per_pass=run.tokens_per_pass),
                   icon=":material/trending_down:")
    elif not check.flags:
        st.success(lesson("speculative", "faster", speedup=run.speedup, per_pass=run.tokens_per_pass, c=run.c),
                   icon=":material/trending_up:")
    note = formula_note(run) if ok else None
    if note:
        st.markdown(note)
    verify_ratio = run.verify_cost_ratio
    if ok and verify_ratio == verify_ratio and not note:  # not NaN: at least one round drafted something
        st.markdown(lesson("speculative", "verify cost", ratio=verify_ratio,
                           expected=run.expected_speedup_measured_verify))
    if params.temperature == 0 and not run.identical:
        st.error(lesson("speculative", "outputs differ"))
    elif params.temperature > 0:
        st.info(lesson("speculative", "sampled"), icon=":material/casino:")

    chart(progress_lines(run), "measured",
          "Tokens written against engine-measured time; each speculative step is one round (draft + one verify "
          "pass).")
    c1, c2 = st.columns(2)
    with c1:
        chart(rounds_bar(run), "model", "Per round: green accepted drafts, red rejected drafts (below 0), then the "
                                        "target's own token (yellow correction, blue bonus).")
    with c2:
        chart(round_times_bar(run), "measured", "Draft and verify wall time per round; the dashed line is one "
                                                "plain decode step. Verifying k tokens costs somewhat more than one "
                                                "step on a CPU, far less than k steps.")

try_this(lesson("speculative", "try self"), self_draft_answer(result), key="speculative_try")

if result is None:
    nav.link("pages/timeline.py")
    st.stop()
run = result.run

# ---- rounds on demand -----------------------------------------------------------------------------------
with st.expander(f"Every round: q, p and min(1, p/q) ({len(run.rounds)} rounds)"):
    tok_text = dict(zip(run.spec_ids, run.spec_tokens))
    tokenizer = lm.tokenizer

    def t(i):
        return visible(tok_text.get(i) or tokenizer.decode([i]))

    rows = [{"round": r.index + 1, "drafted": " | ".join(t(i) for i in r.drafted) or "(nothing)",
             "accepted": r.accepted, "rejected": " | ".join(t(i) for i in r.rejected),
             "target's token": t(r.token), "kind": r.kind, "from": r.source,
             "draft ms": round(r.draft_seconds * 1000, 1), "verify ms": round(r.verify_seconds * 1000, 1)}
            for r in run.rounds]
    st.dataframe(pd.DataFrame(rows), hide_index=True, height=min(420, 38 + 35 * len(rows)))
    judged = [r for r in run.rounds if r.p]
    if judged:
        pick = st.selectbox("Look inside round", [r.index + 1 for r in judged], key="speculative_round")
        rnd = run.rounds[pick - 1]
        labels = [t(i) for i in rnd.drafted[: len(rnd.p)]]
        detail = pd.DataFrame({"drafted token": labels, "q (draft)": rnd.q, "p (target)": rnd.p,
                               "min(1, p/q)": rnd.accept_probs,
                               "verdict": ["accepted" if i < rnd.accepted else "rejected" for i in range(len(rnd.p))]})
        st.dataframe(detail.round(4), hide_index=True)
        st.markdown(f"The target then added **{t(rnd.token)!r}** ({rnd.kind}), {rnd.source}. Its top choices there: "
                    + ", ".join(f"{t(i)!r} {pr:.2f}" for i, pr in zip(rnd.target_top_ids, rnd.target_top_probs)))
        chart(round_pq_bar(rnd, labels), "model",
              "q and p after the same sampling settings (at temperature 0 both are one-hot: 1 or 0).")

# ---- k sweep on demand ----------------------------------------------------------------------------------
st.header("Where is the best k?", divider="gray")
st.markdown(lesson("speculative", "sweep"))
ks = (1, 2, 3, 4, 6, 8, 12)
sweep_tokens = min(48, int(max_new))
pts = sweep(params, ks, sweep_tokens)
if pts is None and st.button(f"Run the k sweep (k = {', '.join(map(str, ks))}; {sweep_tokens} tokens each)",
                             key="speculative_sweep"):
    bar = st.progress(0.0, text="Sweeping k...")
    pts = sweep(params, ks, sweep_tokens,
                progress=lambda i, n: bar.progress(i / n, text=f"k = {ks[i - 1]} done ({i}/{n})"))
    bar.empty()
if pts:
    best = max(pts, key=lambda p: p.measured_speedup)
    chart(sweep_figure(pts, drafter), "measured",
          f"Measured speedup per k (one race each, plain re-measured) next to the paper's formula with that k's "
          f"measured a, c and draft lengths: with {sweep_tokens} tokens requested, a draft is cut to the tokens "
          "still wanted, so a large k cannot draft k every round.")
    for flag in sweep_flags(pts):
        st.warning(flag, icon=":material/report:")
    verdict = lesson("speculative", "best k" if best.measured_speedup >= 1 else "no k", drafter=drafter, k=best.k,
                     speedup=best.measured_speedup)
    st.markdown(verdict)

nav.link("pages/timeline.py")
