"""The st.* drawing of the two-models page, one function per section."""
from __future__ import annotations

import streamlit as st

from engine.models import background, catalog, packaged
from engine.compare import analysis as C
from engine.models.catalog import Packaged
from engine.models.names import TINY, builtin
from engine.core.loaded import ModelLoadError
from ui.compare import runs as R
from ui.compare import view as V
from ui.frame import archwords as AW
from ui.frame import measured
from ui.compare.figures import decode_bars, kv_lines, params_bar, top5_bar
from ui.frame.html import md_escape
from ui.frame.layout import chart
from ui.frame.lessons import lesson
from ui.frame.models import policy


def pick_pair(current: str) -> tuple[str, str]:
    """Two models from what this server offers (class mode: its allow-list; else the built-in ones): the
    sidebar's model and the second packaged model, Gemma 3 270M (or the first, SmolLM2, when the sidebar's is the
    second) by default; the test model tiny-random is compared with nothing until a second model is picked."""
    pol = policy()
    names = pol.labels if pol.class_mode else list(builtin())
    if current not in names:
        names = [current, *names]
    a_def = current
    first, second = catalog.names()[:2]
    b_def = current if current == TINY else second if current != second and second in names else first
    b_def = b_def if b_def in names else names[-1]
    c1, c2 = st.columns(2)
    a = c1.selectbox("Model A", names, index=names.index(a_def), key="compare_a")
    b = c2.selectbox("Model B", names, index=names.index(b_def), key="compare_b")
    if a == b:
        st.info("Pick two different models to compare.", icon=":material/info:")
        st.stop()
    for r in (catalog.row(pol.target_of(a)), catalog.row(pol.target_of(b))):
        if r is None or not r.background:
            continue
        if not packaged.installed(r):  # nothing to prepare: say how to install it, and let another pair be picked
            st.warning(lesson("compare", "gemma not installed", command=r.install), icon=":material/download:")
            st.stop()
        background_gate(r)
    load_both(a, b)
    return a, b


def load_both(a: str, b: str) -> None:
    """Load both models here, outside every cached function: a first load may draw progress (Gemma's
    preparation), and an element drawn inside st.cache_data would be replayed on every later hit. A model that
    cannot be loaded is said in its own words (then another pair can be picked), never as an unexpected error."""
    for name in (a, b):
        try:
            R.facts_info(name)  # loads it
        except ModelLoadError as exc:
            st.error(md_escape(str(exc)), icon=":material/error:")
            st.stop()


def background_gate(r: Packaged) -> None:
    """A packaged model prepared in the background (Gemma 3 270M) not prepared, and no background preparation
    running (it is off, ILE_PREPARE_GEMMA=0): offer to prepare it rather than start minutes of work on a page
    visit. Otherwise loading waits on the background preparation with its progress (ui.frame.models)."""
    if packaged.tokenizer_ready(r) or not background.disabled() or background.current(r.name) is not None:
        return
    st.info(lesson("compare", "gemma not ready"), icon=":material/hourglass_empty:")
    if not st.button(f"Prepare {r.called} now", key="compare_prepare", icon=":material/download:"):
        st.stop()
    background.start(r.name)


def facts(a: str, b: str) -> None:
    """The facts as a static table: its cells wrap, so a long value ("15 sliding (window 512), 3 global (layers 5,
    11, 17)") is read whole at 1366x768, where a data grid's fixed-width cells cut it."""
    df = V.facts_table(R.facts(a, b), a, b)
    st.table(V.highlight_differences(df).hide(axis="index"))
    st.caption(lesson("compare", "facts caption", numbering=AW.NUMBERING))


def params(a: str, b: str) -> None:
    splits = {a: R.params(a), b: R.params(b)}
    chart(params_bar(splits), "model", lesson("compare", "params caption"))
    st.dataframe(V.params_table(splits), hide_index=True, width="stretch")


def kv(a: str, b: str) -> None:
    load_both(a, b)
    with st.spinner(f"Feeding {R.KV_LENGTHS[-1]:,} tokens through each model's cache and reading its bytes..."):
        points = {a: R.kv(a), b: R.kv(b)}
    derived = {n: [(t, C.kv_bytes_at(R.facts_info(n), t)) for t in R.KV_DERIVED
                   if t <= R.facts_info(n).max_positions] for n in (a, b)}  # not past a model's own context
    chart(kv_lines(points, derived), "measured", lesson("compare", "kv caption"))
    st.dataframe(V.kv_table(points, derived), hide_index=True, width="stretch")
    cols = st.columns(2)
    for col, n in zip(cols, (a, b)):
        first, last = V.per_token(points[n])
        if len(points[n]) < 2:  # a context too short to measure growth over two lengths
            col.metric(f"{n}: bytes per new token (measured)", "n/a")
            continue
        col.metric(f"{n}: bytes per new token (measured)", f"{last:,.0f} B",
                   delta=f"{last - first:+,.0f} B vs the first {points[n][1].tokens} tokens", delta_color="off")
    st.markdown(lesson("compare", "kv note", models=" ".join(V.kv_growth_words(n, R.facts_info(n)) for n in (a, b)),
                       per_layer=", ".join(V.kv_per_layer_words(n, R.facts_info(n)) for n in (a, b))))


def decode(a: str, b: str) -> None:
    with st.spinner("Timing one decode step of each model, stage by stage (3 repeats each)..."):
        runs = {a: R.decode(a), b: R.decode(b)}
        bw = R.bandwidth_gb_s(a)
    stage_ms = {n: {s: sp.median for s, sp in m.value.decode.stage_ms.items()} for n, m in runs.items()}
    medians = {n: m.value.decode.plain_total_ms.median for n, m in runs.items()}
    steps = {n: R.step_bytes(n, R.DECODE_PROMPT) for n in runs}
    floors = {n: steps[n].floor_ms(bw) for n in runs}
    head = {n: m.value.decode.shares().get("output projection", float("nan")) for n, m in runs.items()}
    chart(decode_bars(stage_ms, floors), "measured", lesson("compare", "decode caption", bw=bw))
    st.dataframe(V.decode_rows(list(runs), medians, steps, floors, head), hide_index=True, width="stretch")
    measured.measure_again_bar([m.calibration for m in runs.values()], R.again_key(), "both decode timings")


def top5(a: str, b: str, prompt: str) -> None:
    text = st.text_input("Prompt (plain text, no chat template)", lesson("compare", "default prompt"),
                         key="compare_prompt", max_chars=2000).strip() or prompt
    cols = st.columns(2)
    for col, n in zip(cols, (a, b)):
        with col:
            t = R.top5(n, text)
            chart(top5_bar(n, t.tokens, t.probs), "measured",
                  f"One forward pass of {n} over the {t.prompt_tokens} tokens of the prompt; softmax of its last logits.")
