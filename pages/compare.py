"""Two models side by side: SmolLM2-135M (Llama layout) and Gemma 3 270M, on the same machine and prompt."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st

from ui.compare import sections
from ui.frame import nav
from ui.frame.layout import beside, section, what_you_see
from ui.frame.predict import ask
from ui.frame.lessons import lesson
from ui.frame.state import settings

nav.through_router()
st.title("Two models side by side")
a, b = sections.pick_pair(settings().model)
if section(None):  # the introduction with section 1: the facts are the first screen, the lesson boxes under them
    st.markdown(lesson("compare", "intro"))
    st.header("1. The architecture facts, differences shaded", divider="gray")
    sections.facts(a, b)
    main, side = beside(1, 1)
    with main:
        what_you_see(lesson("compare", "what you see"))
    with side:
        ask("compare", "try this", lesson("compare", "answer"), key="compare_try")

if section("2. Where the parameters are"):
    sections.params(a, b)
    st.markdown(lesson("compare", "params note"))

if section("3. KV cache: bytes per token and at longer contexts"):
    sections.kv(a, b)

if section("4. One decode step: time, stages, bytes read"):
    sections.decode(a, b)
    st.markdown(lesson("compare", "decode note") + " " + lesson("timeline", "below floor"))  # one wording, both pages

if section("5. The same prompt, the next token"):
    sections.top5(a, b, settings().prompt)
    st.markdown(lesson("compare", "top5 note"))

st.divider()
for col, target in zip(st.columns(3), ["pages/attention.py", "pages/kv_cache.py", "pages/tokenization.py"]):
    with col:
        nav.link(target)
