"""Batching: many users share one model. Batched decode measured by batch size; a real scheduler, static vs
continuous; one user's latency on a quiet and a busy server."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st

from ui.batching import runs
from ui.batching import sections
from ui.batching import view as V
from ui.batching import classroom as class_view
from ui.frame import nav
from ui.batching.figures import workload_chart
from ui.frame.layout import beside, chart, section, what_you_see
from ui.frame.predict import ask
from ui.frame.lessons import lesson

nav.through_router()
st.title("Batching: serving many users at once")
class_view.section()  # the teacher's live view of this server's own traffic (only with the teacher's token)
lm = runs.page_model()

batch_box = None  # the first screen's question, filled once the sweep below has (or has not) measured it
if section(None):
    st.markdown(lesson("batching", "intro"))
    main, side = beside()  # the requests on the first screen, the lesson boxes beside them
    with side:
        what_you_see(lesson("batching", "what you see"))
        batch_box = st.container()
    with main:
        cfg = sections.settings()
        reqs = runs.workload_for(lm.ref, cfg.ws)
        st.header("1. The requests", divider="gray")
        chart(workload_chart(reqs), "derived", V.workload_caption(cfg.ws, reqs), key="batching_workload")
else:
    cfg = sections.settings()  # the settings drive every later section (presenter view: one section on view)
ran = sections.run_button(cfg.key(lm.ref))  # nothing below is measured until pressed for these settings

if ran:
    sweep, results, load = sections.measure(lm.ref, cfg)
if batch_box is not None:
    with batch_box:
        ask("batching", "try batch", lesson("batching", "answer batch"), key="batching_try_sweep",
            verdict=V.verdict(sweep if ran else None), pending=lesson("batching", "try batch pending"))

if ran and section("2. One user leaves the hardware idle"):
    sections.one_user(sweep)

if ran and section("3. Static vs continuous batching"):
    sections.policies(results, cfg.max_batch)

if ran and section("4. Your request on a quiet and on a busy server"):
    sections.load(load, cfg.rates)
c = st.columns(2)
with c[0]:
    nav.link("pages/timeline.py")
with c[1]:
    nav.link("pages/speculative.py")
