"""KV cache: what it holds, how big it grows on this run (measured = formula), and what it costs real models."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st

from ui.kv_cache import sections
from ui.kv_cache import view as V
from ui.frame import nav
from ui.kv_cache.figures import growth_chart
from ui.frame.layout import beside, chart, notes, section, what_you_see
from ui.frame.lessons import lesson
from ui.frame.models import current_model
from ui.frame.predict import ask
from ui.precision.sections import precision_note
from ui.frame.runs import current_trace

nav.through_router()
st.title("KV cache: the model's notes on every earlier token")
lm = current_model()
info = lm.info
tr = current_trace()
notes(tr)
rc = V.run_cache(info, tr)
if static := V.static_cache_note(info, tr):
    st.caption(static)

# 1 (the cache tensors on the first screen, the lesson boxes beside them) -------------------------------------
if section(None):
    st.markdown(lesson("kv_cache", "intro"))
    main, side = beside()
    with main:
        st.header("1. What the cache holds", divider="gray")
        sections.cache_tensors(lm, tr, rc)
    with side:
        what_you_see(V.what_you_see(info, rc))
        st.caption(precision_note(lm))
        question, answer = V.token_question(info, rc)
        ask("kv_cache", V.token_section(info), answer, key="kv_try_token", verdict=V.token_verdict(info, rc),
            text=question)
    st.markdown(V.holds_text(info, rc))

# 2 -------------------------------------------------------------------------------------------------------------
if section("2. Measured size, step by step"):
    st.markdown(V.formula_text(info, rc))
    for col, (label, value, help_) in zip(st.columns(3), V.size_metrics(rc)):
        col.metric(label, value, help=help_)
    if rc.all_equal:
        st.success(lesson("kv_cache", "agree"), icon=":material/check_circle:")
    else:
        st.error(lesson("kv_cache", "differ"), icon=":material/error:")
    chart(growth_chart(tr.steps, V.growth_words(rc), rc.formula_bytes), "measured",
          lesson("kv_cache", "growth caption", prompt=rc.prompt), key="kv_growth")
    with st.expander("Every step, in bytes"):
        st.dataframe(V.steps_table(tr, rc), hide_index=True)

# 3-4 (one fragment: the calculator drives both) ---------------------------------------------------------------
if section(None):  # the fragment draws its own headers 3 and 4
    sections.calculator_and_paging()

# 5 -------------------------------------------------------------------------------------------------------------
if section("5. The cost of not caching"):
    st.markdown(V.no_cache_text(rc))
    nav.link("pages/timeline.py", "Measure it: decode with and without the cache")

if section(None):  # draws its own header; the two real models, measured past Gemma's 512-token window
    sections.past_the_window(lm)
