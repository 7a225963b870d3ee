"""The attention page's blocks that hold widgets, drawn whole (the page lays them out in order): the clickable
overview with its layer/head pickers, the window and query pickers, the on-demand cost measurement, the logit lens.

Each block is a fragment, so its widgets rerun only their part of the page, not the whole script:
sections 1-3 are one (the layer and head on view drive all three), section 2's pickers a nested one, the cost
measurement one, the lens another."""
from __future__ import annotations

import streamlit as st

from ui.frame import errors

from engine.attention.analysis import fit_power, kv_groups
from ui.attention import view as V
from ui.frame import archwords as AW
from ui.frame import kept, state
from ui.attention.runs import HEAD_KEY, LAYER_KEY, clamp_selection, cost_sweep, lens_of, overview_chart
from ui.attention.figures import (DRAW_MAX, LENS_DRAW_MAX, attention_map, cost_chart, final_prob_line, gqa_diagram,
                                  head_overview, kv_saving_bar, lens_grid, query_bar)
from ui.frame.html import md_escape, visible
from ui.frame.layout import chart
from ui.frame.lessons import lesson

COST_RUN = "attention_cost_run"  # kept: the model whose cost sweep was asked for (the sweep then follows the slider)
REPEATS = 3  # timed passes per length


@errors.fragment
def heads(p: V.Prompt, info, tr, lead=None) -> None:
    """Sections 1-3: every head at a glance with the layer/head pickers, the head on view, its K/V group.
    ``lead`` draws the page's lesson boxes above the head's map (they describe it): section 1's overview comes
    first, so a 1366x768 screen shows a chart without scrolling."""
    st.header("1. Every head at a glance", divider="gray")
    layer, head = overview(p, info)
    if V.window_note(info):  # under the chart, whose layer axis already names each kind: the chart stays high
        st.caption(":material/view_week: " + V.window_note(info))
    st.header(f"2. Layer {layer}, head {head}: who looks at whom", divider="gray")
    if lead is not None:
        lead()
    one_head(p, layer, head)
    st.header(V.gqa_header(info), divider="gray")
    if info.refused("gqa"):
        st.info(f"Not shown for this model: {info.refused('gqa')}.", icon=":material/block:")
        return
    g = V.gqa(info, tr, head)
    st.markdown(g.text)
    chart(gqa_diagram(g.groups, head, AW.attention_kind(info)), "model",
          lesson("attention", "gqa caption", group=g.group), key="attention_gqa")
    if g.shared:
        chart(kv_saving_bar(g.contexts, g.bytes_gqa, g.bytes_mha, info.n_heads, info.n_kv_heads), "derived",
              V.saving_caption(info, g), key="attention_kv")


@errors.fragment
def one_head(p: V.Prompt, layer: int, head: int) -> None:
    """Section 2: the head's map and one query's row; the window and query pickers rerun only this."""
    start, query = query_pick(p)
    weights = p.head(layer, head)  # [m, m]
    window = p.windows[layer] if layer < len(p.windows) else None
    kind = f" (sliding window of {window})" if window else ""
    chart(attention_map(weights, p.toks, f"Attention weights, layer {layer}{kind}, head {head}", start, DRAW_MAX,
                        query, window),
          "model", lesson("attention", "map caption"), key="attention_map")
    chart(query_bar(weights, p.toks, query, f"layer {layer}, head {head}"), "model", lesson("attention", "bar caption"),
          key="attention_bar")


def overview(p: V.Prompt, info) -> tuple[int, int]:
    """Section 1: every head's summary, clickable, beside the layer and head pickers; returns the head on view."""
    left, right = st.columns([3, 1])
    with right:  # the pickers beside the chart, so the chart starts high on the first screen
        metric = st.radio("Summary per head", V.METRICS, key="attention_metric")
        s = V.summary(p, metric)
        clamp_selection(info.n_layers, info.n_heads)  # a shared link's head, or the last one, kept in range
        layer = st.selectbox("Layer", list(range(info.n_layers)), key=LAYER_KEY)
        head = st.selectbox("Head", list(range(info.n_heads)), key=HEAD_KEY)
        state.put_page_params(layer=layer, head=head)  # a copied link opens this head
        state.write_query_params()  # a fragment rerun does not reach app.py's write: the link follows the head here
        st.metric(f"{s.name}, layer {layer} head {head}", s.at(layer, head))
        st.caption(lesson("attention", "pick a head"))
    with left:
        overview_chart(head_overview(s.values, s.name, s.unit, (layer, head),
                                     kv_groups(info.n_heads, info.n_kv_heads), p.windows), "model", s.explain)
    return layer, head


def query_pick(p: V.Prompt) -> tuple[int, int]:
    """Section 2's pickers: the window of positions drawn (long prompts only) and the query token; (start, query)."""
    start = 0
    if p.m > DRAW_MAX:
        start = st.slider(f"Window of positions drawn (at most {DRAW_MAX} at a time)", 0, p.m - DRAW_MAX,
                          p.m - DRAW_MAX, key="attention_window")
        st.caption(V.window_caption(start, DRAW_MAX, p.m))
    stop = min(p.m, start + DRAW_MAX)
    query = st.selectbox("Query token (the one doing the looking)", list(range(start, stop)), index=stop - 1 - start,
                         format_func=lambda i: f"{i}: {visible(p.toks[i])}", key="attention_query")
    return start, query


@errors.fragment
def cost(lm) -> None:
    """Section 4's measurement: prefill timed at each length, on a button press (then kept for this model)."""
    if lm.info.refused("attention_time"):
        st.info(f"The cost measurement is not shown for this model: {lm.info.refused('attention_time')}.",
                icon=":material/block:")
        return
    max_len = st.select_slider("Longest prompt to measure (tokens)", [128, 256, 512, 1024], value=128,
                               key="attention_cost_max")
    lengths = [L for L in (16, 32, 64, 128, 256, 512, 1024) if L <= max_len]
    if st.button("Measure on this machine", icon=":material/timer:", key="attention_cost_go"):
        kept.put(COST_RUN, lm.ref)
    if kept.get(COST_RUN) != lm.ref:
        st.caption(lesson("attention", "cost not run", lengths=", ".join(map(str, lengths)), passes=REPEATS + 1))
        return
    pts = cost_sweep(lm.ref, lengths, REPEATS)
    ns = [p.tokens for p in pts]
    chart(cost_chart(ns, [p.forward_s for p in pts], [p.attention_s for p in pts],
                     fit_power(ns, [p.attention_median for p in pts], 2)),
          "measured", lesson("attention", "cost caption", repeats=REPEATS), key="attention_cost")
    st.markdown(V.cost_result(pts))


@errors.fragment
def lens(lm, tr, info) -> None:
    """Section 5's lens: the prediction after every block at the last prompt positions, and at the last one."""
    if info.refused("lens"):
        st.info(f"The logit lens is not shown for this model: {info.refused('lens')}.", icon=":material/block:")
        return
    with st.spinner("Reading the residual stream through the output head at every layer..."):
        ln = lens_of(lm, tr)
    covered = n_cols = len(ln.positions)
    if covered > 2:
        n_cols = st.slider("Positions shown (the last ones of the prompt)", 2, covered, min(covered, LENS_DRAW_MAX),
                           key="attention_lens_cols")
    n = len(tr.prompt_ids)
    if n > covered:
        st.caption(lesson("attention", "lens covers", covered=covered, n=n, vocab=info.vocab_size))
    chart(lens_grid(ln.top_tokens, ln.top_probs, ln.input_tokens, ln.positions, n_cols), "model",
          lesson("attention", "lens caption"), key="attention_lens")
    answer = ln.top_tokens[-1][-1][0]
    chart(final_prob_line(ln.final_prob[:, -1], answer), "model",
          lesson("attention", "lens line caption", answer=md_escape(repr(visible(answer)))),
          key="attention_lens_line")


def local_and_global(lm) -> None:
    """Section 3b (windowed models): a sliding-window layer beside a global one on a prompt past the window,
    run on demand (one recorded pass over window + 88 tokens)."""
    from engine.attention.analysis import window_pair
    from ui.attention.runs import window_length, window_view_for
    from ui.attention.figures import window_maps

    pair = window_pair(lm.info)
    if pair is None:
        return
    local, glob = pair
    w = lm.info.arch.windows[local]
    n = window_length(w)
    st.header("Local and global layers past the window", divider="gray")
    st.markdown(lesson("attention", "local global", local=local, glob=glob, n=n,
                       window_words=AW.window_words(lm.info.arch, local),
                       local_are=_are(len(lm.info.arch.sliding_layers)), n_layers=lm.info.n_layers))
    if not st.toggle(f"Run a {n}-token prompt and record both layers", key="attention_window_run"):
        return
    with st.spinner(f"One pass over {n} tokens, recording attention..."):
        view = window_view_for(lm.ref, n)
    names = (f"layer {local}: sliding window of {w}", f"layer {glob}: global")
    chart(window_maps(view, names), "model", lesson("attention", "local global caption", rows=n - view.q0, n=n))
    c1, c2 = st.columns(2)
    c1.metric(f"Layer {local}: attention on keys {w}+ back", f"{view.beyond_window_mass(0):.1%}",
              help="Measured from the recorded weights: zero, the window masks them.")
    c2.metric(f"Layer {glob}: attention on keys {w}+ back", f"{view.beyond_window_mass(1):.1%}",
              help="Measured from the recorded weights: a global layer still reads the oldest tokens.")


def _are(n: int) -> str:
    """"1 layer is", "18 layers are": the local count as the lesson's sentence needs it."""
    return f"{AW.count(n, 'layer')} {'is' if n == 1 else 'are'}"
