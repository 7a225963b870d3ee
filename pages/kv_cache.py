"""KV cache: what it holds, how big it grows on this run (measured = formula), and what it costs real models."""
import ui.boot  # noqa: F401  first: every module imported once, in one thread (see ui/boot.py)
import pandas as pd
import streamlit as st

from engine.stages import kv_presets as kp
from engine.kv import kv_bytes_for
from engine.stages.paging import VLLM_BLOCK_SIZE, allocate, request_lengths
from ui import nav, state
from ui.html import visible
from ui.kv_cache_data import snapshot_for
from ui.kv_figures import (cache_heatmap, context_sweep, fmt_bytes, growth_chart, memory_bar, paging_chart,
                           paging_totals, variants_bar)
from ui.layout import chart, common_mistake, notes, try_this, what_you_see
from ui.models import current_model
from ui.precision_view import precision_note
from ui.runs import current_trace

nav.through_router()
st.title("KV cache: the model's notes on every earlier token")
st.markdown("To choose each new token, attention compares it with **every earlier token**. Their keys and values "
            "never change, so the loop keeps them in a cache instead of recomputing them. This page opens that "
            "cache on your run, weighs it, and scales it up to well-known models.")
lm = current_model()
info = lm.info
tr = current_trace()
notes(tr)
bpv = info.bytes_per_value
per_token = kv_bytes_for(info, 1)
last = tr.steps[-1]
group = info.n_heads // max(1, info.n_kv_heads)
design = ("multi-head attention: one KV head per query head" if group == 1 else
          f"grouped-query attention: each KV head is shared by {group} query heads")

what_you_see(
    f"**{info.source}** has {info.n_layers} layers, {info.n_heads} query heads and **{info.n_kv_heads} KV heads** "
    f"({design}). After your run the cache holds **{last.kv_tokens} tokens** and weighs "
    f"**{fmt_bytes(last.kv_bytes)}**, measured from the tensors themselves. Further down: the same arithmetic for 8B to 671B models.")
st.caption(precision_note(lm))
try_this(f"Each new token adds the same number of bytes to this model's cache. Using the numbers above and "
         f"{bpv} bytes per value ({info.dtype}), how many?",
         f"2 (a key and a value) \u00d7 {info.n_layers} layers \u00d7 {info.n_kv_heads} KV heads \u00d7 "
         f"{info.head_dim} values per head \u00d7 {bpv} bytes = **{per_token:,} bytes** ({fmt_bytes(per_token)}). "
         f"Only the {info.n_kv_heads} KV heads count, not all {info.n_heads} query heads.", key="kv_try_token")

# 1 -------------------------------------------------------------------------------------------------------------
st.header("1. What the cache holds", divider="gray")
st.markdown(
    f"In every layer, each token's vector is projected to a **key** (what this token offers to be found by) and a "
    f"**value** (what it hands over when found). The cache keeps both, per layer, as tensors of shape "
    f"**[batch, KV heads, tokens, head_dim] = [1, {info.n_kv_heads}, {last.kv_tokens}, {info.head_dim}]** "
    f"in {info.dtype}: {info.n_layers} layers \u00d7 2 = {2 * info.n_layers} tensors. The last chosen token "
    "is not in it yet: it would be added by the next step.")
with st.spinner("Replaying the run to read the real cache tensors..."):
    snap = snapshot_for(lm.name, tuple(tr.prompt_ids), tuple(tr.generated_ids))
c1, c2, c3 = st.columns([2, 1, 1])
layer = c1.slider("Layer", 0, info.n_layers - 1, min(info.n_layers - 1, info.n_layers // 2), key="kv_layer")
which = c2.radio("Tensor", ["keys", "values"], horizontal=True, key="kv_which")
head = c3.selectbox("KV head", list(range(info.n_kv_heads)), key="kv_head")
arr = (snap.keys if which == "keys" else snap.values)[layer, head]  # [tokens, head_dim]
labels = (list(tr.prompt_tokens) + list(tr.generated_tokens))[: snap.tokens]
chart(cache_heatmap(arr, labels, len(tr.prompt_ids),
                    f"Layer {layer}, KV head {head}: cached {which}, one column per token"), "model",
      f"The real cached {which} after the last step: a column is one token's vector for this head (hover for "
      f"the token), a row is one of its {info.head_dim} channels. "
      + ("Keys are cached after RoPE has rotated them by position. "
         if which == "keys" and info.position_encoding == "rope" else "")
      + f"Replayed cache: {fmt_bytes(snap.measured_bytes)}, the same {snap.measured_bytes:,} bytes the run measured"
      + (" \u2714" if snap.measured_bytes == last.kv_bytes else f" (run: {last.kv_bytes:,})") + ".",
      key="kv_heatmap")

# 2 -------------------------------------------------------------------------------------------------------------
st.header("2. Measured size, step by step", divider="gray")
formula_bytes = [kv_bytes_for(info, s.kv_tokens) for s in tr.steps]
equal = [s.kv_bytes == f for s, f in zip(tr.steps, formula_bytes)]
st.markdown(
    f"After every step the run summed `numel \u00d7 element_size` over the cache's tensors. The formula:\n\n"
    f"**2** (K and V) \u00d7 **{info.n_layers}** layers \u00d7 **{info.n_kv_heads}** KV heads \u00d7 "
    f"**{info.head_dim}** head_dim \u00d7 **tokens** \u00d7 **{bpv}** bytes ({info.dtype}) "
    f"= **{per_token:,} bytes \u00d7 tokens**")
m1, m2, m3 = st.columns(3)
m1.metric("Measured after the last step", f"{last.kv_bytes:,} B", help="Summed over the real cache tensors")
m2.metric(f"Formula at {last.kv_tokens} tokens", f"{formula_bytes[-1]:,} B")
m3.metric("Steps where they agree", f"{sum(equal)} of {len(equal)}")
if all(equal):
    st.success("Measured and formula agree exactly at every step.", icon=":material/check_circle:")
else:
    st.error("Measured and formula differ at some step: see the table.", icon=":material/error:")
chart(growth_chart(tr.steps, per_token, formula_bytes), "measured",
      f"Blue: bytes of the cache tensors measured after each step of this run; red: the formula. The prefill "
      f"writes all {tr.steps[0].kv_tokens} prompt tokens at once, then each decode step adds one token.",
      key="kv_growth")
with st.expander("Every step, in bytes"):
    st.dataframe(pd.DataFrame([{"step": s.index, "phase": s.phase, "token chosen": visible(s.token),
                                "tokens cached": s.kv_tokens, "measured (bytes)": s.kv_bytes,
                                "formula (bytes)": f, "equal": e}
                               for s, f, e in zip(tr.steps, formula_bytes, equal)]), hide_index=True)

# 3 -------------------------------------------------------------------------------------------------------------
st.header("3. Calculator: real models, real contexts", divider="gray")
presets = kp.load_presets()
names = [p.name for p in presets]
c1, c2, c3, c4, c5 = st.columns([2, 1, 1, 1, 1])
name = c1.selectbox("Model (published config)", names, index=names.index("Llama-3-8B"), key="kv_preset")
p = kp.preset(name)
context = c2.number_input("Context (tokens)", 1, 10_000_000, 8192, step=1024, key="kv_context",
                          help=f"Tokens per sequence. {name}'s native window: {p.context_window:,}.")
batch = c3.number_input("Batch (sequences)", 1, 4096, 1, key="kv_batch")
kv_dtype = c4.selectbox("KV cache dtype", list(kp.DTYPE_BITS), index=1, key="kv_dtype",
                        help="fp8 and int8 caches store 1 byte per value (serving engines quantize keys and "
                             "values with a scale per head or block; the scales are not counted here).")
w_opts = list(kp.DTYPE_BITS)
w_dtype = c5.selectbox("Weights dtype", w_opts, index=w_opts.index(p.weights_dtype), key=f"kv_wdtype_{name}",
                       help=f"Published: {p.weights_dtype}")
b = kp.budget(p, int(context), int(batch), kv_dtype, w_dtype)
bits = kp.DTYPE_BITS[kv_dtype]
if p.is_mla:
    st.markdown(f"**{name}** uses multi-head latent attention: per layer and token it caches one latent of "
                f"**{p.kv_lora_rank}** values plus one shared RoPE key of **{p.qk_rope_head_dim}** values, for all "
                f"{p.n_heads} heads together:\n\n**{p.n_layers}** layers \u00d7 (**{p.kv_lora_rank}** + "
                f"**{p.qk_rope_head_dim}**) \u00d7 **{bits / 8:g}** bytes = **{b.kv_per_token:,} bytes per token**")
else:
    st.markdown(f"**{name}** ({p.attention}): **2** \u00d7 **{p.n_layers}** layers \u00d7 **{p.n_kv_heads}** KV "
                f"heads \u00d7 **{p.head_dim}** head_dim \u00d7 **{bits / 8:g}** bytes ({kv_dtype}) = "
                f"**{b.kv_per_token:,} bytes per token**")
if context > p.context_window:
    st.caption(f":material/info: {context:,} tokens is beyond {name}'s native window of {p.context_window:,}.")
m1, m2, m3, m4 = st.columns(4)
m1.metric("KV per token", fmt_bytes(b.kv_per_token))
m2.metric(f"KV for {batch} \u00d7 {context:,} tokens", fmt_bytes(b.kv_total))
m3.metric(f"Weights ({p.n_params / 1e9:,.2f} B params, {w_dtype})", fmt_bytes(b.weights))
m4.metric("Weights + KV", fmt_bytes(b.total))
chart(memory_bar(b.weights, b.kv_total, kp.GPU_MEMORY_GB, f"weights ({w_dtype})", f"KV cache ({kv_dtype})"),
      "derived", "Published parameter count \u00d7 bytes per weight, plus the formula above; activations and "
      "framework overhead are not counted. Dotted lines: common GPU memory sizes (24, 40, 80, 141 GB).",
      key="kv_membar")
fit = []
for gpu, tokens in b.gpu_fit_tokens:
    if b.weights > gpu * kp.GB:
        verdict = "the weights alone do not fit"
    else:
        verdict = (f"fits; room for {tokens:,} cached tokens in all" if b.total <= gpu * kp.GB else
                   f"does not fit: room for only {tokens:,} cached tokens ({tokens // max(1, batch):,} per sequence)")
    fit.append({"GPU memory": f"{gpu} GB", "this setup": verdict})
st.dataframe(pd.DataFrame(fit), hide_index=True)
sweep = sorted({2**k for k in range(9, 18)} | {int(context)})
chart(context_sweep(sweep, [kp.kv_bytes_total(p, t, int(batch), bits) for t in sweep], b.weights,
                    kp.GPU_MEMORY_GB, f"{name}, batch {batch}, KV {kv_dtype}"), "derived",
      "Weights + the formula's KV cache at each context length; the cache grows linearly with tokens and batch.",
      key="kv_sweep")

llama70 = kp.preset("Llama-3-70B")
right, wrong = kp.kv_bytes_per_token(llama70, 16), kp.kv_bytes_mistaken(llama70, 16)
common_mistake(
    f"Llama-3-70B has {llama70.n_heads} query heads but only {llama70.n_kv_heads} KV heads. "
    f"Counting all query heads gives 2 \u00d7 80 \u00d7 64 \u00d7 128 \u00d7 2 bytes = {wrong:,} bytes = "
    f"**{fmt_bytes(wrong)} per token**, {wrong // right}\u00d7 too much. The cache stores only the KV heads: "
    f"2 \u00d7 80 \u00d7 8 \u00d7 128 \u00d7 2 bytes = {right:,} bytes = **{fmt_bytes(right)} per token** at 16 bits. "
    f"At 128K tokens that is {fmt_bytes(right * 131072)}, not {fmt_bytes(wrong * 131072)}.")
variants = kp.attention_variants(p, bits)
vk = {v.kind: v for v in variants}
own = next(v for v in variants if v.is_model)
try_this(f"If {name} used multi-query attention (one KV head for all {p.n_heads} query heads), how much smaller "
         f"would its cache per token be than with its own design ({own.kind})?",
         f"The cache scales with the number of KV heads: MQA needs {fmt_bytes(vk['MQA'].bytes_per_token)} per token "
         f"against {fmt_bytes(own.bytes_per_token)}, "
         f"{own.bytes_per_token / vk['MQA'].bytes_per_token:.1f}\u00d7 less. Latent attention (MLA) caches one "
         f"compressed vector per layer, shared by all heads: {fmt_bytes(vk['MLA'].bytes_per_token)}.",
         key="kv_try_variants")
chart(variants_bar(variants, name), "derived",
      f"Same layers and head sizes, {kv_dtype}. Red: {name}'s own design; blue: what-if variants. "
      + ("" if p.is_mla else "MLA here uses DeepSeek-V2's sizing: latent 4 \u00d7 head_dim + RoPE key "
         "head_dim / 2 values per layer. ") + "Fewer KV heads save memory but can cost quality.",
      key="kv_variants")
with st.expander("All presets: published configs and KV bytes per token at 16 bits"):
    st.dataframe(pd.DataFrame([{
        "model": q.name, "attention": q.attention, "layers": q.n_layers, "query heads": q.n_heads,
        "KV heads": "latent" if q.is_mla else str(q.n_kv_heads), "head_dim": q.head_dim, "hidden": q.hidden_size,
        "parameters": f"{q.n_params / 1e9:,.2f} B", "weights dtype": q.weights_dtype,
        "KV bytes per token": kp.kv_bytes_per_token(q, 16), "KV per token": fmt_bytes(kp.kv_bytes_per_token(q, 16)),
        "source": q.hf_id} for q in presets]), hide_index=True)
    if p.note:
        st.caption(f"{name}: {p.note}")

# 4 -------------------------------------------------------------------------------------------------------------
st.header("4. Paged allocation", divider="gray")
st.markdown(
    "A server does not know how long an answer will be. Reserving a contiguous cache for the **maximum length** "
    "per request wastes everything the request never uses. A **paged** cache (PagedAttention, as in vLLM) hands "
    f"out blocks of **{VLLM_BLOCK_SIZE} token slots** as the sequence grows, so each request wastes at most the "
    "empty tail of its last block.")
c1, c2 = st.columns(2)
n_req = c1.slider("Requests", 2, 32, 12, key="kv_requests")
max_len = c2.select_slider("Maximum length (tokens)", [512, 1024, 2048, 4096, 8192], 2048, key="kv_maxlen")
seed = state.settings()["seed"]
alloc = allocate(request_lengths(int(n_req), int(max_len), int(seed)), int(max_len), VLLM_BLOCK_SIZE)
chart(paging_chart(alloc), "illustrative",
      f"Request lengths are random (log-uniform, seed {seed} from the sidebar); the slot counts are exact for "
      f"those lengths.", key="kv_paging")
m1, m2, m3 = st.columns(3)
m1.metric("Tokens held", f"{alloc.used:,}")
m2.metric("Empty slots, paged", f"{alloc.paged_waste:,}",
          help=f"At most {VLLM_BLOCK_SIZE - 1} per request: {(VLLM_BLOCK_SIZE - 1) * n_req:,} for {n_req}")
m3.metric("Empty slots, contiguous", f"{alloc.contiguous_waste:,}")
chart(paging_totals(alloc, b.kv_per_token), "illustrative",
      f"The same requests in bytes for {name} with a {kv_dtype} cache ({b.kv_per_token:,} bytes per token slot).",
      key="kv_paging_totals")

# 5 -------------------------------------------------------------------------------------------------------------
st.header("5. The cost of not caching", divider="gray")
fed = sum(s.tokens_in for s in tr.steps)
without = sum(s.kv_tokens for s in tr.steps)
st.markdown(
    f"With the cache, this run fed **{fed:,} tokens** through the model: the prompt once, then one token per step. "
    f"Without it, every step would have to re-run the whole sequence so far: **{without:,} tokens** "
    f"({without / max(1, fed):.1f}\u00d7 as many), and the gap grows with every token generated. "
    "The price of the cache is the memory above.")
nav.link("pages/timeline.py", "Measure it: decode with and without the cache")
