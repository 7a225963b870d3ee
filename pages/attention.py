"""Attention: which earlier tokens each token reads, head by head; what it costs; what the blocks make of it."""
import ui.boot  # noqa: F401  first: every module imported once, in one thread (see ui/boot.py)
import streamlit as st

from engine.stages.attention import (fit_power, first_token_pull, growth_exponent, gqa_saving, head_entropy_bits,
                              head_mean_distance, kv_groups, kv_head_of)
from engine.trace import ATTN_MAX
from ui import nav, state
from ui.attention_data import (HEAD_KEY, LAYER_KEY, clamp_selection, cost_sweep, lens_of, overview_chart)
from ui.attention_figures import (DRAW_MAX, LENS_DRAW_MAX, attention_map, cost_chart, final_prob_line,
                                  gqa_diagram, head_overview, kv_saving_bar, lens_grid, query_bar,
                                  residual_norms_chart)
from ui.html import visible
from ui.layout import chart, notes, try_this, what_you_see
from ui.models import current_model
from ui.runs import current_trace

nav.through_router()
st.title("Attention: how each token reads the ones before it")
st.markdown("Inside every block, **attention** is the one step where positions exchange information. Each "
            "*head* scores every earlier token against the current one (query \u00b7 key), turns the scores "
            "into weights that sum to 1 (softmax), and takes a weighted mix of their *values*.")
lm = current_model()
info = lm.info
tr = current_trace()
notes(tr)
a = tr.analysis
att = a.attentions  # [layers, heads, m, m]
n = len(tr.prompt_ids)
m = att.shape[-1]
toks = tr.prompt_tokens[:m]
if n > m:
    st.warning(f"Your prompt has {n} tokens; attention weights are kept for the first {m} only "
               f"(they take layers \u00d7 heads \u00d7 n\u00b2 numbers). Later positions are not drawn.",
               icon=":material/content_cut:")
pull = first_token_pull(att)

what_you_see(
    f"Real attention weights of **{info.n_layers} layers \u00d7 {info.n_heads} heads** on your {m}-token prompt. "
    "Rows are the token doing the looking (query), columns the tokens it looks at (keys). A token may only "
    "look back: the grey triangle is the *causal mask*, positions it is not allowed to see.")
sink = pull.heads_mostly_first * 3 >= pull.heads_total
try_this(
    "Take the very last token of the prompt. Across all the heads, which single earlier token do you expect "
    "it to look at most? A meaningful word from your question?",
    (f"Mostly not. In this run, **{pull.heads_mostly_first} of {pull.heads_total} heads** put their largest "
     f"weight on position 0 ({visible(toks[0])!r}), on average **{pull.mean_weight_first:.0%}** of the "
     "weight. A head must spend its whole budget of 1 somewhere; when it has nothing useful to read, the "
     "weight piles onto the first token, an *attention sink*. The heads that do read your words stand out."
     if sink else
     f"In this run, {pull.heads_mostly_first} of {pull.heads_total} heads put their largest weight on "
     f"position 0, on average {pull.mean_weight_first:.0%} of the weight. Trained models usually pile much "
     "more onto the first token (an *attention sink*, where a head puts weight it has no use for); try the "
     "embedded model to see it."),
    key="attention_try")

# ---------------------------------------------------------------- 1. overview
st.header("1. Every head at a glance", divider="gray")
metric = st.radio("Summary per head", ["entropy (bits)", "mean distance (tokens)"], horizontal=True,
                  key="attention_metric")
if metric.startswith("entropy"):
    values, name, unit = head_entropy_bits(att), "Attention entropy", "bits"
    explain = ("Entropy of each head's weights, averaged over query positions: 0 bits = every token looks at "
               "exactly one other token; higher = spread over many.")
else:
    values, name, unit = head_mean_distance(att), "Mean distance attended", "tokens"
    explain = ("How far back each head looks, in tokens, averaged over query positions (0 = at itself). "
               f"A head that always reads position 0 scores about {(m - 1) / 2:.0f} on this prompt.")
layer, head = clamp_selection(info.n_layers, info.n_heads)
groups = kv_groups(info.n_heads, info.n_kv_heads)
left, right = st.columns([3, 1])
with right:
    st.selectbox("Layer", list(range(info.n_layers)), key=LAYER_KEY)
    st.selectbox("Head", list(range(info.n_heads)), key=HEAD_KEY)
    layer, head = st.session_state[LAYER_KEY], st.session_state[HEAD_KEY]
    state.put_page_params(layer=layer, head=head)  # a copied link opens this head
    st.metric(f"{name}, layer {layer} head {head}", f"{values[layer, head]:.2f} {unit}")
    st.caption("Click a cell in the chart, or pick a layer and head here, to open that head below.")
with left:
    overview_chart(head_overview(values, name, unit, (layer, head), groups), "model", explain)

# ---------------------------------------------------------------- 2. one head
st.header(f"2. Layer {layer}, head {head}: who looks at whom", divider="gray")
start = 0
if m > DRAW_MAX:
    start = st.slider(f"Window of positions drawn (at most {DRAW_MAX} at a time)", 0, m - DRAW_MAX, m - DRAW_MAX,
                      key="attention_window")
    st.caption(f"Drawing positions {start}-{start + DRAW_MAX - 1} of {m}. Weight that falls on keys before the "
               "window is not drawn, so rows in the picture can sum to less than 1.")
stop = min(m, start + DRAW_MAX)
query = st.selectbox("Query token (the one doing the looking)", list(range(start, stop)), index=stop - 1 - start,
                     format_func=lambda i: f"{i}: {visible(toks[i])}", key="attention_query")
chart(attention_map(att[layer, head], toks, f"Attention weights, layer {layer}, head {head}", start, DRAW_MAX,
                    query), "model",
      "Weights from the model's own attention (eager attention, float16 copy). Each row sums to 1 over the "
      "cells it may see; grey cells are masked future positions, not zero weights.", key="attention_map")
chart(query_bar(att[layer, head], toks, query, f"layer {layer}, head {head}"),
      "model", "One row of the map above as bars: the weights over every earlier token add up to 1. "
               "Red: the largest.", key="attention_bar")

# ---------------------------------------------------------------- 3. grouped-query attention
st.header("3. Grouped-query attention: heads share keys and values", divider="gray")
kv = kv_head_of(head, info.n_heads, info.n_kv_heads)
share = gqa_saving(info, n + len(tr.generated_ids))
contexts = sorted({n + len(tr.generated_ids), 2048, info.max_positions})
savings = [gqa_saving(info, c) for c in contexts]
g = info.n_heads // info.n_kv_heads
if info.n_kv_heads < info.n_heads:
    st.markdown(
        f"This model has **{info.n_heads} query heads** but only **{info.n_kv_heads} key/value heads**: each "
        f"group of {g} query heads reads the same keys and values. Head {head} reads K/V head **{kv}**, shared "
        f"with heads {', '.join(str(h) for h in groups[kv] if h != head)}. Each head still asks its own question "
        "(its own query), so heads in one group can look at different tokens, but the cache stores "
        f"{info.n_kv_heads} K/V heads per layer instead of {info.n_heads}: **{share.ratio:.0f}\u00d7 smaller**.")
else:
    st.markdown(f"This model gives every one of its {info.n_heads} query heads its own key/value head "
                "(plain multi-head attention), so nothing is shared.")
chart(gqa_diagram(groups, head), "model",
      "The model's configuration, wired as transformers' repeat_kv does: query head h reads K/V head "
      f"h // {g}. Your selected head is outlined.", key="attention_gqa")
if info.n_kv_heads < info.n_heads:
    chart(kv_saving_bar(contexts, [s.bytes_gqa for s in savings], [s.bytes_mha for s in savings], info.n_heads,
                        info.n_kv_heads), "derived",
          f"2 (K and V) \u00d7 {info.n_layers} layers \u00d7 KV heads \u00d7 {info.head_dim} dims \u00d7 tokens "
          f"\u00d7 {info.bytes_per_value} bytes ({info.dtype}). {contexts[0]} tokens = this run's prompt + output; "
          f"{info.max_positions:,} = the model's longest context.", key="attention_kv")
nav.link("pages/kv_cache.py")

# ---------------------------------------------------------------- 4. cost
st.header("4. The cost grows with the square of the length", divider="gray")
st.markdown(
    f"Every token is compared with every earlier one: n(n+1)/2 scores per head per layer. For your {n} tokens "
    f"that is **{n * (n + 1) // 2:,}** scores per head, **{info.n_layers * info.n_heads * n * (n + 1) // 2:,}** "
    "in the whole model. Double the prompt and the scores roughly quadruple, while the rest of the model "
    "(the weight matrices, applied once per token) only doubles.")
max_len = st.select_slider("Longest prompt to measure (tokens)", [128, 256, 512, 1024], value=128,
                           key="attention_cost_max")
lengths = [L for L in (16, 32, 64, 128, 256, 512, 1024) if L <= max_len]
repeats = 3
if st.button("Measure on this machine", icon=":material/timer:", key="attention_cost_go"):
    st.session_state["attention_cost_run"] = lm.name
if st.session_state.get("attention_cost_run") == lm.name:
    pts = cost_sweep(lm.name, lengths, repeats)
    ns = [p.tokens for p in pts]
    fwd = [p.forward_median for p in pts]
    att_s = [p.attention_median for p in pts]
    chart(cost_chart(ns, [p.forward_s for p in pts], [p.attention_s for p in pts], fit_power(ns, att_s, 2)),
          "measured",
          f"Prefill of a filler text at each length: 1 warm-up pass, then median of {repeats} timed passes "
          "(bars: min to max). The red line is time inside the attention kernels (PyTorch SDPA, all layers). "
          "The dotted curve is a reference c\u00b7n\u00b2 scaled to the red points, not a measurement. "
          "The CPU is shared, so expect noise.", key="attention_cost")
    st.markdown(
        f"From {ns[-2]} to {ns[-1]} tokens, the whole pass took **{fwd[-1] / fwd[-2]:.1f}\u00d7** as long "
        f"(growth exponent {growth_exponent(ns, fwd):.1f}) and attention **{att_s[-1] / att_s[-2]:.1f}\u00d7** "
        f"(exponent {growth_exponent(ns, att_s):.1f}; 1 = linear, 2 = quadratic). Attention was "
        f"**{att_s[-1] / fwd[-1]:.0%}** of the pass at {ns[-1]} tokens: on short prompts the weight matrices "
        "dominate, and the quadratic part takes over only on long ones.")
else:
    st.caption(f"Runs prefill at {', '.join(map(str, lengths))} tokens ({repeats + 1} passes each) on the real "
               "model; results are kept, so the chart then stays.")

# ---------------------------------------------------------------- 5. logit lens
st.header("5. Inside the blocks: the prediction taking shape", divider="gray")
st.markdown(
    "Each block *adds* its result to the residual stream. The **logit lens** reads that stream after every "
    "block as if it were the last: final norm, then the output head, then softmax. Early layers guess "
    "something shallow; the real answer forms in the later layers.")
with st.spinner("Reading the residual stream through the output head at every layer..."):
    lens = lens_of(lm, tr)
covered = len(lens.positions)
cols = covered
if covered > 2:
    cols = st.slider("Positions shown (the last ones of the prompt)", 2, covered, min(covered, LENS_DRAW_MAX),
                     key="attention_lens_cols")
if n > covered:
    st.caption(f"The lens covers the last {covered} of {n} prompt positions (to bound the work: every cell "
               f"is a product with the whole {info.vocab_size:,}-token output matrix).")
chart(lens_grid(lens.top_tokens, lens.top_probs, lens.input_tokens, lens.positions, cols), "model",
      "Each cell: the most likely next token if the model stopped after that block, at that position; colour "
      "= its probability. The bottom row is the model's real output (checked equal in the tests). Hover for "
      "the top 3.", key="attention_lens")
answer = lens.top_tokens[-1][-1][0]
chart(final_prob_line(lens.final_prob[:, -1], answer), "model",
      f"At the last position, the probability each block's lens gives to the token the model finally ranks "
      f"first ({visible(answer)!r}).", key="attention_lens_line")
chart(residual_norms_chart(a.residual_norms), "model",
      "L2 norm of the residual-stream vector after each block (before the final norm). Each block adds to "
      "the stream, so it tends to grow. Watch the first token: its vector often becomes far larger than "
      "the rest, the same token that soaks up spare attention (the sink).",
      key="attention_norms")
nav.link("pages/sampling.py")
