"""Speculative decoding: plain decoding and draft-and-verify race on the same prompt, for real."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st

from ui.frame import nav
from ui.speculative import runs
from ui.speculative import sections
from ui.frame.layout import chart, section, what_you_see
from ui.frame.predict import ask
from ui.frame.lessons import lesson
from ui.frame.models import current_model
from ui.speculative.view import how_lanes_ran, self_draft_answer, self_draft_verdict
from ui.frame.figures import progress_lines
from ui.speculative.figures import round_times_bar, rounds_bar
from ui.record.sections import save_race

nav.through_router()
st.title("Speculative decoding: the race")
lm = current_model()  # compiled mode races compiled: plain decode steps and verify passes

if section(None):
    st.markdown(lesson("speculative", "intro"))
    what_you_see(lesson("speculative", "what you see"))

params = sections.controls(lm)  # the race's settings, above every section (the race and the sweep read them)

# ---- the race: runs only when Start is pressed -------------------------------------------------------------
result, raced = sections.lanes(params)  # stops the page here when the prompt or the drafter is refused
st.caption(lesson("speculative", "clocks", n=runs.repeats()))
if result is not None:
    st.caption(how_lanes_ran(result.run))

# ---- summary (of the race shown: after a control moved, the last race, labelled with its own k) ---------
if result is not None and section("Who won, and why" if raced == params else
                                  f"Who won the last race (k = {raced.k}), and why"):
    run = result.run
    sections.scoreboard(result, raced)
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
    # ---- rounds on demand -------------------------------------------------------------------------------
    with st.expander(f"Every round: q, p and min(1, p/q) ({len(run.rounds)} rounds)"):
        sections.rounds(run, lm.tokenizer)
    save_race(result, raced)  # this race as one file, and as a page that replays both lanes offline

ask("speculative", "try self", self_draft_answer(result), key="speculative_try", verdict=self_draft_verdict(result),
    pending=lesson("speculative", "try self pending"))

# ---- k sweep on demand ----------------------------------------------------------------------------------
if result is not None and section("Where is the best k?"):
    st.markdown(lesson("speculative", "sweep"))
    sections.k_sweep(params)

nav.link("pages/timeline.py")
