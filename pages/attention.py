"""Attention: which earlier tokens each token reads, head by head; what it costs; what the blocks make of it."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st

from ui.attention import sections
from ui.attention import view as V
from ui.frame import nav
from ui.attention.figures import residual_norms_chart
from ui.frame.layout import beside, chart, notes, section, what_you_see
from ui.frame.lessons import lesson
from ui.frame.models import current_model
from ui.frame.predict import ask
from ui.frame.runs import current_trace

nav.through_router()
st.title("Attention: how each token reads the ones before it")
lm = current_model()
info = lm.info
tr = current_trace()
notes(tr)
refused = V.refusal(info)  # this architecture's weights could not be recorded faithfully (engine.core.archfacts)
p = None if refused else V.prompt_of(tr)

if section(None, with_next=True):  # a short introduction: on a projector, on the first section's screen
    st.markdown(lesson("attention", "intro"))
    if refused:
        st.info(refused, icon=":material/block:")
    elif p.n > p.m:
        st.warning(lesson("attention", "cut", n=p.n, m=p.m), icon=":material/content_cut:")


def lead() -> None:
    """The lesson boxes, drawn above the head's map (section 2), which they describe."""
    main, side = beside(1, 1)
    with main:
        what_you_see(lesson("attention", "what you see", layers=info.n_layers, heads=info.n_heads, m=p.m))
    with side:
        ask("attention", "try sink", V.sink_answer(p), key="attention_try", verdict=V.sink_verdict(p))


# ---------------------------------------------------------------- 1-3. the heads (one fragment: see the module)
if section(None):  # the fragment draws its own headers 1-3
    if not refused:
        sections.heads(p, info, tr, lead)
        sections.local_and_global(lm)  # windowed models only: a sliding layer beside a global one, past the window
    nav.link("pages/kv_cache.py")

# ---------------------------------------------------------------- 4. cost
if section("4. The cost grows with the square of the length"):
    st.markdown(V.cost_text(info, len(tr.prompt_ids)))
    sections.cost(lm)

# ---------------------------------------------------------------- 5. logit lens
if section("5. Inside the blocks: the prediction taking shape"):
    st.markdown(lesson("attention", "lens"))
    sections.lens(lm, tr, info)
    chart(residual_norms_chart(tr.analysis.residual_norms), "model", lesson("attention", "norms caption"),
          key="attention_norms")
    nav.link("pages/sampling.py")
