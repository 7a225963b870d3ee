"""Attention: which earlier tokens each token reads, head by head; what it costs; what the blocks make of it."""
import ui.boot  # noqa: F401  first: every module imported once, in one thread (see ui/boot.py)
import streamlit as st

from ui import attention_sections as sections
from ui import attention_view as V
from ui import nav
from ui.attention_figures import residual_norms_chart
from ui.layout import chart, notes, try_this, what_you_see
from ui.lessons import lesson
from ui.models import current_model
from ui.runs import current_trace

nav.through_router()
st.title("Attention: how each token reads the ones before it")
st.markdown(lesson("attention", "intro"))
lm = current_model()
info = lm.info
tr = current_trace()
notes(tr)
refused = V.refusal(info)
if refused:  # this architecture's weights could not be recorded faithfully (engine.archfacts): one line, no map
    st.info(refused, icon=":material/block:")
else:
    p = V.prompt_of(tr)
    if p.n > p.m:
        st.warning(lesson("attention", "cut", n=p.n, m=p.m), icon=":material/content_cut:")

    what_you_see(lesson("attention", "what you see", layers=info.n_layers, heads=info.n_heads, m=p.m))
    try_this(lesson("attention", "try sink"), V.sink_answer(p), key="attention_try")

    # ------------------------------------------------------------ 1-3. the heads (one fragment: see the module)
    sections.heads(p, info, tr)
    sections.local_and_global(lm)  # windowed models only: a sliding layer beside a global one, past the window
nav.link("pages/kv_cache.py")

# ---------------------------------------------------------------- 4. cost
st.header("4. The cost grows with the square of the length", divider="gray")
st.markdown(V.cost_text(info, len(tr.prompt_ids)))
sections.cost(lm)

# ---------------------------------------------------------------- 5. logit lens
st.header("5. Inside the blocks: the prediction taking shape", divider="gray")
st.markdown(lesson("attention", "lens"))
sections.lens(lm, tr, info)
chart(residual_norms_chart(tr.analysis.residual_norms), "model", lesson("attention", "norms caption"),
      key="attention_norms")
nav.link("pages/sampling.py")
