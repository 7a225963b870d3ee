"""The KV-cache page's blocks that hold widgets, drawn whole (the page lays them out in order): the real cache
tensors, the calculator for published models, and paged allocation.

Each is a fragment, so its widgets rerun only their part of the page: the cache tensors' pickers,
sections 3-4 together (the calculator's model and dtypes drive section 4's bytes), the paging sliders."""
from __future__ import annotations

import streamlit as st

from ui.frame import errors

from engine.kv_cache import presets as kp
from engine.kv_cache.paging import VLLM_BLOCK_SIZE, allocate, request_lengths
from ui.kv_cache import view as V
from ui.frame import state
from ui.kv_cache.runs import snapshot_for
from ui.kv_cache.figures import cache_heatmap, context_sweep, memory_bar, paging_chart, paging_totals, variants_bar
from ui.frame.html import md_escape
from ui.frame.layout import chart, common_mistake
from ui.frame.predict import ask
from ui.frame.lessons import lesson


@errors.fragment
def cache_tensors(lm, tr, rc: V.RunCache) -> None:
    """Section 1's heatmap: one layer's cached keys or values for one KV head, read from a replay of the run."""
    info = lm.info
    if info.refused("kv_cache"):
        st.info(f"The cache tensors are not shown for this model: {info.refused('kv_cache')}.", icon=":material/block:")
        return
    with st.spinner("Replaying the run to read the real cache tensors..."):
        try:
            snap = snapshot_for(lm.ref, tuple(tr.prompt_ids), tuple(tr.generated_ids))
        except ValueError as exc:  # e.g. layers caching different numbers of KV heads: one line, not a traceback
            st.info(f"The cache tensors are not shown for this model: {exc}.", icon=":material/block:")
            return
    c1, c2, c3 = st.columns([2, 1, 1])
    layer = c1.slider("Layer", 0, info.n_layers - 1, min(info.n_layers - 1, info.n_layers // 2), key="kv_layer")
    which = c2.radio("Tensor", ["keys", "values"], horizontal=True, key="kv_which")
    head = c3.selectbox("KV head", list(range(info.n_kv_heads)), key="kv_head")
    arr = (snap.keys if which == "keys" else snap.values)[layer, head]  # [tokens, head_dim]
    labels = (list(tr.prompt_tokens) + list(tr.generated_tokens))[: snap.tokens]
    chart(cache_heatmap(arr, labels, len(tr.prompt_ids),
                        f"Layer {layer}, KV head {head}: cached {which}, one column per token"), "model",
          V.heatmap_caption(info, which, snap, rc, layer), key="kv_heatmap")
    if snap.layer_bytes:
        with st.expander("Bytes per layer: measured from each layer's tensors, and the formula"):
            st.dataframe(V.layer_table(info, snap), hide_index=True)


@errors.fragment
def calculator_and_paging() -> None:
    """Sections 3 and 4: the calculator, the variants and presets it leads to, and paged allocation in its bytes."""
    st.header("3. Calculator: real models, real contexts", divider="gray")
    calc = calculator()
    common_mistake(V.mistake())
    var = V.variants(calc)
    ask("kv_cache", "try variants", var.answer, key="kv_try_variants", text=var.question)
    chart(variants_bar(var.rows, calc.name), "derived", var.caption, key="kv_variants")
    with st.expander("All presets: published configs and KV bytes per token at 16 bits"):
        st.dataframe(V.presets_table(), hide_index=True)
        if calc.p.note:
            st.caption(f"{md_escape(calc.name)}: {md_escape(calc.p.note)}")

    st.header("4. Paged allocation", divider="gray")
    st.markdown(lesson("kv_cache", "paging", block=VLLM_BLOCK_SIZE))
    paging(calc)


def calculator() -> V.Calc:
    """Section 3's calculator: a published model, context, batch and dtypes; its budget against GPU sizes."""
    names = [p.name for p in kp.load_presets()]
    c1, c2, c3, c4, c5 = st.columns([2, 1, 1, 1, 1])
    name = c1.selectbox("Model (published config)", names, index=names.index("Llama-3-8B"), key="kv_preset")
    p = kp.preset(name)
    context = c2.number_input("Context (tokens)", 1, 10_000_000, 8192, step=1024, key="kv_context",
                              help=f"Tokens per sequence. {name}'s published window: {p.context_window:,} "
                                   f"({md_escape(p.context_source)}).")
    batch = c3.number_input("Batch (sequences)", 1, 4096, 1, key="kv_batch")
    kv_dtype = c4.selectbox("KV cache dtype", list(kp.DTYPE_BITS), index=1, key="kv_dtype",
                            help="fp8 and int8 caches store 1 byte per value (serving engines quantize keys and "
                                 "values with a scale per head or block; the scales are not counted here).")
    w_opts = list(kp.DTYPE_BITS)
    w_dtype = c5.selectbox("Weights dtype", w_opts, index=w_opts.index(p.weights_dtype), key=f"kv_wdtype_{name}",
                           help=f"Published: {p.weights_dtype}")
    c = V.Calc(name, p, context, batch, kv_dtype, w_dtype, kp.budget(p, int(context), int(batch), kv_dtype, w_dtype))
    st.markdown(V.calc_formula(c))
    if context > p.context_window:
        st.caption(":material/info: " + lesson("kv_cache", "beyond window", context=context, model=name,
                                               window=p.context_window))
    for col, (label, value) in zip(st.columns(4), V.budget_metrics(c)):
        col.metric(label, value)
    chart(memory_bar(c.b.weights, c.b.kv_total, kp.GPU_MEMORY_GB, f"weights ({w_dtype})", f"KV cache ({kv_dtype})"),
          "derived", lesson("kv_cache", "memory caption"), key="kv_membar")
    st.dataframe(V.fit_table(c), hide_index=True)
    sweep, totals = V.sweep_of(c)
    chart(context_sweep(sweep, totals, c.b.weights, kp.GPU_MEMORY_GB, f"{name}, batch {batch}, KV {kv_dtype}"),
          "derived", lesson("kv_cache", "sweep caption"), key="kv_sweep")
    return c


@errors.fragment
def paging(c: V.Calc) -> None:
    """Section 4: seeded request lengths, their slots paged vs contiguous, and those slots in bytes for ``c``."""
    c1, c2 = st.columns(2)
    n_req = c1.slider("Requests", 2, 32, 12, key="kv_requests")
    max_len = c2.select_slider("Maximum length (tokens)", [512, 1024, 2048, 4096, 8192], 2048, key="kv_maxlen")
    seed = state.settings().seed
    alloc = allocate(request_lengths(int(n_req), int(max_len), int(seed)), int(max_len), VLLM_BLOCK_SIZE)
    chart(paging_chart(alloc), "illustrative", lesson("kv_cache", "paging caption", seed=seed), key="kv_paging")
    m1, m2, m3 = st.columns(3)
    m1.metric("Tokens held", f"{alloc.used:,}")
    m2.metric("Empty slots, paged", f"{alloc.paged_waste:,}",
              help=f"At most {VLLM_BLOCK_SIZE - 1} per request: {(VLLM_BLOCK_SIZE - 1) * n_req:,} for {n_req}")
    m3.metric("Empty slots, contiguous", f"{alloc.contiguous_waste:,}")
    chart(paging_totals(alloc, c.b.kv_per_token), "illustrative",
          lesson("kv_cache", "paging totals caption", model=c.name, dtype=c.kv_dtype, per_token=c.b.kv_per_token),
          key="kv_paging_totals")


def past_the_window(lm) -> None:
    """Section 6 (the two real models): both caches measured past Gemma 3's sliding window, against the
    per-layer formula (ui.compare.sections.kv). On SmolLM2 it appears once Gemma has been prepared, and loads it
    on demand; each model is described from its own facts once it is loaded."""
    from engine.models import catalog, packaged
    from ui.compare import sections as compare_sections
    from ui.compare.runs import KV_LENGTHS
    from engine.core.loaded import ModelRef
    from ui.frame.models import get_model
    from ui.tokenization.runs import pair_offered

    name = lm.ref.name
    first, second = catalog.rows()[:2]  # SmolLM2 (GQA) and Gemma 3 (MQA with sliding windows)
    if name not in (first.name, second.name) or not pair_offered() or not packaged.tokenizer_ready(second):
        return
    other = first.name if name == second.name else second.name
    st.header("6. Past the sliding window: MQA with windows vs GQA, measured", divider="gray")
    st.markdown(V.cache_words(lm.info))
    if name == first.name and not st.toggle("Load Gemma 3 270M beside SmolLM2 and measure both", key="kv_past_window"):
        return  # on demand: a second model (1 GB) is loaded only when asked for
    st.markdown(V.cache_words(get_model(ModelRef(other)).info) + " " + lesson("kv_cache", "past window", longest=KV_LENGTHS[-1]))
    compare_sections.kv(name, other)
