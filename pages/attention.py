"""Attention: which earlier tokens each token reads, head by head; what it costs; what the blocks make of it."""
import ui.boot  # noqa: F401  first: every module imported once, in one thread (see ui/boot.py)
import streamlit as st

from ui import attention_sections as sections
from ui import attention_view as V
from ui import nav
from ui.attention_figures import DRAW_MAX, attention_map, gqa_diagram, kv_saving_bar, query_bar, residual_norms_chart
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
p = V.prompt_of(tr)
if p.n > p.m:
    st.warning(lesson("attention", "cut", n=p.n, m=p.m), icon=":material/content_cut:")

what_you_see(lesson("attention", "what you see", layers=info.n_layers, heads=info.n_heads, m=p.m))
try_this(lesson("attention", "try sink"), V.sink_answer(p), key="attention_try")

# ---------------------------------------------------------------- 1. overview
st.header("1. Every head at a glance", divider="gray")
layer, head = sections.overview(p, info)

# ---------------------------------------------------------------- 2. one head
st.header(f"2. Layer {layer}, head {head}: who looks at whom", divider="gray")
start, query = sections.query_pick(p)
weights = p.head(layer, head)  # [m, m]
chart(attention_map(weights, p.toks, f"Attention weights, layer {layer}, head {head}", start, DRAW_MAX, query),
      "model", lesson("attention", "map caption"), key="attention_map")
chart(query_bar(weights, p.toks, query, f"layer {layer}, head {head}"), "model", lesson("attention", "bar caption"),
      key="attention_bar")

# ---------------------------------------------------------------- 3. grouped-query attention
st.header("3. Grouped-query attention: heads share keys and values", divider="gray")
g = V.gqa(info, tr, head)
st.markdown(g.text)
chart(gqa_diagram(g.groups, head), "model", lesson("attention", "gqa caption", group=g.group), key="attention_gqa")
if g.shared:
    chart(kv_saving_bar(g.contexts, g.bytes_gqa, g.bytes_mha, info.n_heads, info.n_kv_heads), "derived",
          V.saving_caption(info, g), key="attention_kv")
nav.link("pages/kv_cache.py")

# ---------------------------------------------------------------- 4. cost
st.header("4. The cost grows with the square of the length", divider="gray")
st.markdown(V.cost_text(info, p.n))
sections.cost(lm)

# ---------------------------------------------------------------- 5. logit lens
st.header("5. Inside the blocks: the prediction taking shape", divider="gray")
st.markdown(lesson("attention", "lens"))
sections.lens(lm, tr, info)
chart(residual_norms_chart(tr.analysis.residual_norms), "model", lesson("attention", "norms caption"),
      key="attention_norms")
nav.link("pages/sampling.py")
