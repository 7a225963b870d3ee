"""Serving engines: the loop's timings measured on a real server (vLLM, SGLang, llama.cpp's server, ...) over HTTP."""
import ui.frame.boot  # noqa: F401  first: every module imported once, in one thread (see ui/frame/boot.py)
import streamlit as st

from ui.frame import nav
from ui.serving import sections
from ui.frame.layout import section
from ui.frame.predict import lesson_intro
from ui.frame.html import md_escape
from ui.serving.view import fmt

nav.through_router()
st.title("Serving engines: the same loop on a real server")
if section(None):
    lesson_intro("serving")

st.header("1. Connect to a server", divider="gray")
cfg, info = sections.connect()  # stops the page here until a server answers (above every section: all need it)

if section("2. One request, streamed token by token"):
    sections.one_request(cfg)

if section("3. The next-token distribution, from the server"):
    sections.next_token(cfg)

if section("4. Prompt length: time to first token vs time per token"):
    sections.prompt_sweep(cfg)

if section("5. Many users at once: throughput vs latency"):
    sections.concurrency(cfg, info)

st.divider()
for col, target in zip(st.columns(3), ["pages/timeline.py", "pages/batching.py", "pages/speculative.py"]):
    with col:
        nav.link(target)
st.caption(f"Connected to {md_escape(cfg.where)}; values: {fmt(None)} = not reported by the server.")
