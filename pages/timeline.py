"""Prefill vs decode, and where the time goes: every number measured on this machine, or derived and said so."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st

from ui.frame import nav
from ui.precision import sections as precision_view
from ui.timeline import sections
from ui.timeline import view as V
from ui.frame.layout import beside, chart, notes, presenting, section, what_you_see
from ui.frame.predict import ask
from ui.frame.lessons import lesson
from ui.frame.models import current_model
from ui.frame.runs import current_trace
from ui.frame.state import settings
from ui.timeline.figures import gantt

nav.through_router()
st.title("Prefill vs decode: where the time goes")
lm = current_model()
s = settings()
tr = current_trace(alone=True)  # its timeline is the lesson: step times measured alone, never in a batch
notes(tr)
tl = V.timeline_of(tr)
ids = tuple(tr.prompt_ids)

if section(None):
    st.markdown(lesson("timeline", "intro"))
    main, side = beside(2, 1)  # the timeline on the first screen, the lesson boxes beside it
    with main:
        st.header("1. The timeline of this run", divider="gray")
        chart(gantt(tl), "measured", V.gantt_caption(tl), key="timeline_gantt")
        sections.metrics(V.run_metrics(tl))
        sections.mode_check(lm, tr, s)
    with side:
        top, below = st.container(), st.container()
        # on the projector the room's question comes first, its tally and answer beside the timeline
        with below if presenting() else top:
            what_you_see(lesson("timeline", "what you see"))
            st.warning(lesson("timeline", "noisy"), icon=":material/speed:")
        with top if presenting() else below:
            ask("timeline", "try this", lesson("timeline", "answer"), key="timeline_try", verdict=V.verdict(tl))
    st.markdown(lesson("timeline", "first token", ttft=tl.ttft_ms))

if section("2. With and without the KV cache"):
    sections.cache(lm, ids, s.max_new_tokens)

if section("3. Prompt length: time to first token vs time per token"):
    sections.sweep(lm)

if section("4. Where one forward pass spends its time"):
    sections.breakdown(lm, ids, s)

if section("5. Why decode is memory-bound"):
    sections.roofline(lm, tl, ids)

if section("6. Training vs inference: memory of one pass"):
    sections.memory(lm, ids)

if section("7. Fewer bytes, faster decode"):
    precision_view.render(lm, sections.read_bandwidth(lm, ids))

if section("8. Kernel by kernel: what the device does during one step"):
    sections.kernels(lm, ids)
    st.divider()
    for col, target in zip(st.columns(3), ["pages/kv_cache.py", "pages/speculative.py", "pages/batching.py"]):
        with col:
            nav.link(target)
